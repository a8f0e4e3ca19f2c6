#include <layerinit/checkpoint/hf_config.hpp>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/family_record.hpp>

namespace layerinit {

namespace {

// The record of a family layerinit writes a config.json for, nullptr for the others.
const hf::FamilyRecord* written_family(const std::string& fam) {
  const hf::FamilyRecord* f = hf::find_family(fam);
  return f && f->write ? f : nullptr;
}

// The user's config.json, refused when it describes quantized weights. Byte for byte, unless it
// declares a dtype other than the file's: transformers loads the weights as config.json's "dtype"
// (else "torch_dtype") says, so a float32 config over bf16 weights would load them as float32
// without a word. Then each of the two keys it has says the file's dtype.
std::string checked_hf_config(const ModelSpec& spec, DType dtype) {
  // Ordered: a rewritten config keeps the user's order of keys.
  auto j = nlohmann::ordered_json::parse(spec.hf_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const auto& q = j["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? " (" + printable(q["quant_method"].get<std::string>(), 64) + ")"
                                   : "";
    bad_argument("config.json", ": quantization_config" + method +
                                    " describes quantized weights, and layerinit writes fp32/fp16/bf16 ones that transformers "
                                    "would load as quantized: remove quantization_config from the config");
  }
  const std::string file_dtype(torch_dtype_name(dtype));
  bool differs = false;
  for (const char* key : {"dtype", "torch_dtype"})
    if (j.is_object() && j.contains(key) && !j[key].is_null() && j[key] != file_dtype) {
      j[key] = file_dtype;
      differs = true;
    }
  return differs ? j.dump(2) + "\n" : spec.hf_config;
}

}  // namespace

bool has_config_json(const ModelSpec& spec) { return !spec.hf_config.empty() || written_family(spec.family); }

std::string config_json(const ModelSpec& spec, DType dtype) {
  if (!spec.hf_config.empty()) return checked_hf_config(spec, dtype);
  const hf::FamilyRecord* record = written_family(spec.family);
  if (!record) {
    std::string supported;
    for (const hf::FamilyRecord& f : hf::family_records())
      if (f.write) supported += (supported.empty() ? "" : ", ") + std::string(f.model_type);
    bad_argument("config.json", ": family " + quote(spec.family) + " has no Hugging Face model_type (supported: " + supported +
                                    "); a spec read from a config.json carries its own");
  }
  nlohmann::ordered_json j;
  j["architectures"] = {record->causal_lm};
  j["model_type"] = record->model_type;
  record->write(spec, j);
  j["torch_dtype"] = torch_dtype_name(dtype);
  return j.dump(2) + "\n";
}

}  // namespace layerinit
