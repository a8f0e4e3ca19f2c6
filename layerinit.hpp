// layerinit: model parameters created layer by layer, directly in fp16/bf16, with values that are a
// pure function of (seed, tensor name, element index). One include for library users.
#pragma once

#include <layerinit/config.hpp>
#include <layerinit/core/bytes.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/core/input_file.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/memory/recycling.hpp>
#include <layerinit/memory/tensor.hpp>
#include <layerinit/memory/tracking.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/families.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/options.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/recorded.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/shard/composite.hpp>
#include <layerinit/shard/mesh.hpp>
#include <layerinit/shard/parallel.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/shard/tensor_index.hpp>
#include <layerinit/stacking/stack.hpp>
#include <layerinit/plan/memory_check.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/checkpoint/parallel.hpp>
#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/checkpoint/verify.hpp>
