#ifndef LOOM_IR_OPS_OPS_H_
#define LOOM_IR_OPS_OPS_H_

#include "ir/op_schema.h"

namespace loom::ir {

// One registration function per op family; each file in ir/ops/ owns its schemas.
void RegisterElementwiseOps(SchemaTable& table);  // elementwise.cc
void RegisterReduceOps(SchemaTable& table);       // reduce.cc
void RegisterLossOps(SchemaTable& table);         // loss.cc
void RegisterNormOps(SchemaTable& table);         // norm.cc
void RegisterMatMulOps(SchemaTable& table);       // matmul.cc
void RegisterAttentionOps(SchemaTable& table);    // attention.cc
void RegisterShapeOps(SchemaTable& table);        // shape.cc
void RegisterMoeOps(SchemaTable& table);          // moe.cc
void RegisterOptimizerOps(SchemaTable& table);    // optimizer.cc
void RegisterPointwiseOps(SchemaTable& table);    // pointwise.cc
void RegisterIndexOps(SchemaTable& table);        // index.cc

}  // namespace loom::ir

#endif  // LOOM_IR_OPS_OPS_H_
