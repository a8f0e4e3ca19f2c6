"""transformers configs of the tiny presets (the numbers tests/readers/hf_meta.py checks against)."""
import transformers

TINY = {
    "llama-tiny": dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    "mixtral-tiny": dict(model_type="mixtral", vocab_size=512, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                         num_experts_per_tok=2, tie_word_embeddings=False),
    "gpt2-tiny": dict(model_type="gpt2", vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                      bos_token_id=511, eos_token_id=511),
}


def config(preset, **changes):
    kwargs = dict(TINY[preset], **changes)
    return transformers.CONFIG_MAPPING[kwargs.pop("model_type")](**kwargs)
