// gpt-oss (openai's gpt-oss-20b and 120b): transformers' models/gpt_oss as one record: attention sinks
// and fused experts with biases. GptOssPreTrainedModel._init_weights draws the sinks and the router's
// bias like weights, which the hf recipe asks the record. layerinit writes no config.json of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// GptOssConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {201088, 2880, 2880, 36, 64, 8, 64, 131072, 1e-5, false, 150000, std::nullopt};

ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "num_local_experts", 128, 4);
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", true);
  l.sinks = true;
  l.moe = MoeKind::gpt_oss;
  return decoder(c, d, std::move(name), h, l, "num_local_experts");
}

}  // namespace

FamilyRecord gpt_oss_record() {
  return {"gpt_oss", "GptOssForCausalLM", kDefaults, {{"num_experts", "num_local_experts"}}, read, {}, true, nullptr,
          {.sinks_and_router_bias_drawn = true}};
}

}  // namespace layerinit::hf
