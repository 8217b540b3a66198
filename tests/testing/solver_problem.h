#ifndef LOOM_TESTS_TESTING_SOLVER_PROBLEM_H_
#define LOOM_TESTS_TESTING_SOLVER_PROBLEM_H_

// A block model's N micro-batches as the reference solver's problem
// (smt/schedule_optimum.h), for the tests and the benchmark that measure the
// schedule search against the optimum.

#include "schedule/block_model.h"
#include "smt/schedule_optimum.h"

namespace loom::testing {

// Job m * blocks + b is block b of micro-batch m. Micro-batches are interchangeable,
// so the copies of each block may start in micro-batch order: giving the k-th
// earliest copy of every block to micro-batch k keeps every dependency (if x_m <= y_m
// for every m, the k-th least x is at most the k-th least y) and changes nothing a
// device runs or holds.
inline smt::ScheduleProblem SolverProblem(const schedule::BlockModel& model, int n) {
  smt::ScheduleProblem p;
  p.num_devices = model.num_devices;
  p.caps = model.memory_cap;
  const int blocks = model.num_blocks();
  for (int m = 0; m < n; ++m) {
    for (const schedule::Block& b : model.blocks) {
      smt::ScheduleJob j;
      j.span = b.span;
      j.memory = b.memory;
      j.devices = b.devices;
      for (const schedule::Dep& d : b.preds) j.preds.push_back({m * blocks + d.block, d.lag});
      p.jobs.push_back(j);
    }
  }
  for (int m = 0; m + 1 < n; ++m) {
    for (int b = 0; b < blocks; ++b) {
      p.symmetric_order.push_back({m * blocks + b, (m + 1) * blocks + b});
    }
  }
  return p;
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_TESTING_SOLVER_PROBLEM_H_
