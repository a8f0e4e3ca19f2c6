// layerinit: model parameters created layer by layer, directly in fp16/bf16, with values that are a
// pure function of (seed, tensor name, element index). One include for library users.
#pragma once

#include "dtypes/dtype.hpp"
#include "init/builder.hpp"
#include "init/naive.hpp"
#include "init/plan.hpp"
#include "init/presets.hpp"
#include "init/recipes.hpp"
#include "init/spec.hpp"
#include "init/spec_json.hpp"
#include "checkpoint/emit.hpp"
#include "kernels/fill.hpp"
#include "layerinit/config.hpp"
#include "memory/backend.hpp"
#include "memory/errors.hpp"
#include "memory/tracking.hpp"
#include "stacking/stack.hpp"
