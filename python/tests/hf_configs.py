"""transformers configs of the tiny models, read from tests/hf_configs/tiny/ (the configs the C++
tests emit and compare with transformers, one source of truth). A tiny preset's name stands for its
family's config ("llama-tiny" -> tiny/llama.json, the same tensors)."""
import json
from pathlib import Path

import transformers

TINY_DIR = Path(__file__).resolve().parents[2] / "tests" / "hf_configs" / "tiny"
PRESETS = {"llama-tiny": "llama", "mixtral-tiny": "mixtral", "gpt2-tiny": "gpt2", "qwen2.5-tiny": "qwen2",
           "gemma-2-tiny": "gemma2", "deepseek-v3-tiny": "deepseek_v3"}


def families():
    """The model_types with a tiny config."""
    return sorted(p.stem for p in TINY_DIR.glob("*.json"))


def config_dict(name):
    return json.loads((TINY_DIR / f"{PRESETS.get(name, name)}.json").read_text())


def config(name, **changes):
    kwargs = dict(config_dict(name), **changes)
    return transformers.CONFIG_MAPPING[kwargs.pop("model_type")](**kwargs)
