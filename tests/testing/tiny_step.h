#ifndef LOOM_TESTS_TESTING_TINY_STEP_H_
#define LOOM_TESTS_TESTING_TINY_STEP_H_

// The training step of a tiny model in fp64 (or in bf16 mixed precision), for
// tests across folders.

#include <cstdint>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "models/models.h"

namespace loom::testing {

// `model` at tiny size with `microbatches` micro-batches; layers and batch 0 take the
// model's defaults. Failures are test failures.
inline ir::Graph TinyStep(const std::string& model, int microbatches, int layers = 0,
                          int64_t batch = 0) {
  models::ModelOptions options;
  options.tiny = true;
  options.layers = layers;
  options.batch = batch;
  options.dtype = ir::DType::kF64;
  auto forward = models::BuildForward(model, options);
  EXPECT_TRUE(forward.ok()) << forward.status();
  ir::TrainingOptions training;
  training.microbatches = microbatches;
  auto step = ir::BuildTrainingStep(*forward, training);
  EXPECT_TRUE(step.ok()) << step.status();
  return *std::move(step);
}

// `model` at tiny size in Megatron-LM's bf16 mixed precision: bf16 parameters
// and activations, f32 main gradients, masters and moments (ir::BuildTrainingStep).
inline ir::Graph TinyBf16Step(const std::string& model, int microbatches, int layers = 0,
                              int64_t batch = 0) {
  models::ModelOptions options;
  options.tiny = true;
  options.layers = layers;
  options.batch = batch;
  options.dtype = ir::DType::kBF16;
  auto forward = models::BuildForward(model, options);
  EXPECT_TRUE(forward.ok()) << forward.status();
  ir::TrainingOptions training;
  training.microbatches = microbatches;
  training.precision = ir::Precision::kBf16;
  auto step = ir::BuildTrainingStep(*forward, training);
  EXPECT_TRUE(step.ok()) << step.status();
  return *std::move(step);
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_TESTING_TINY_STEP_H_
