#include <cstdio>
#include "schedule/placements.h"
#include "schedule/search.h"
using namespace loom::schedule;
int main() {
  struct C { const char* p; int d; int cap; int tessel; };
  C cases[] = {{"vshape",4,4,524},{"xshape",4,4,1035},{"mshape",4,6,780},{"nnshape",4,6,1036},{"nnshape_eager",4,6,1036},
   {"kshape",4,6,773},{"mllm",4,20,-1},{"finetune",4,20,521},{"alphafold",4,20,527},
   {"vshape",6,6,532},{"xshape",6,20,-1},{"mshape",6,20,805},{"nnshape",6,20,-1},{"kshape",6,20,-1},{"mllm",6,20,-1},{"finetune",6,20,-1},{"alphafold",6,20,-1},
   {"vshape",8,8,-1},{"xshape",8,20,-1},{"mshape",8,20,-1},{"nnshape",8,20,-1},{"kshape",8,20,794},{"mllm",8,20,-1},{"finetune",8,20,-1},{"alphafold",8,20,-1}};
  for (auto& c : cases) {
    auto m = MakePlacement(c.p, c.d); m->SetUniformCap(c.cap);
    SearchOptions o; o.microbatches = 128;
    auto r = SearchSchedule(*m, o);
    if (!r.ok()) { printf("%s/%d: %s\n", c.p, c.d, r.status().ToString().c_str()); continue; }
    std::string peaks; for (auto p : r->sim.peak_memory) peaks += std::to_string(p) + "/";
    printf("%-14s D=%d M=%-3d P=%ld LB=%ld lat=%ld K=%d mk=%ld (LB %ld, tessel %d) peaks %s nodes=%ld t=%.4fs %s\n", c.p, c.d, c.cap, r->period, r->period_lower_bound, r->latency, r->in_flight, r->sim.makespan, r->makespan_lower_bound, c.tessel, peaks.c_str(), r->nodes, r->seconds, r->gap_reason.c_str());
  }
}
