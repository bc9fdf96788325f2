#!/usr/bin/env python3
"""Checks autoaccel's PEFT adapter files against the real Hugging Face peft
and transformers packages (which the test suite does not have: its checks are
tests/test_lora_peft.c and tests/cli/test_peft_cli.sh). Run by hand, in an
environment that has torch, transformers and peft, e.g.

    python3 -m venv --system-site-packages /tmp/peftvenv
    /tmp/peftvenv/bin/pip install "transformers==4.38.2" "peft==0.10.0"
    HF_HUB_OFFLINE=1 /tmp/peftvenv/bin/python tests/reference/check_peft_hf.py \\
        --autoaccel build/autoaccel --work /tmp/peftchk

For a tiny Llama (grouped-query, all seven targets) and a tiny GPT-2 (c_attn
and both c_proj, Conv1D with fan_in_fan_out), both trained a few steps by
autoaccel:
  1. export --peft, loaded by PeftModel.from_pretrained onto the base exported
     as a Hugging Face model, gives the logits of autoaccel's export --merge
     loaded as a plain model (float32; both within 1e-4 of each other while
     the adapters move the logits by far more);
  2. adapters made by peft (get_peft_model, B drawn non-zero) and saved with
     save_pretrained import into autoaccel, whose export --merge equals
     peft's merge_and_unload weights within 1e-6.
Exits 1 on a mismatch.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

MODELS = {
    "llama": (LlamaForCausalLM,
              LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                          num_hidden_layers=2, vocab_size=256, max_position_embeddings=16, rms_norm_eps=1e-5,
                          rope_theta=10000.0, tie_word_embeddings=False),
              {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 64,
               "seq_len": 16, "vocab_size": 256},
              ["q", "k", "v", "o", "gate", "up", "down"],
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], ""),
    "gpt2": (GPT2LMHeadModel,
             GPT2Config(n_embd=32, n_layer=2, n_head=2, n_inner=128, n_positions=16, vocab_size=256,
                        layer_norm_epsilon=1e-5),
             {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128, "seq_len": 16, "vocab_size": 256},
             ["qkv", "proj", "fcproj"], ["c_attn", "attn.c_proj", "mlp.c_proj"], "transformer."),
}


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--autoaccel", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    aa, w = os.path.abspath(a.autoaccel), os.path.abspath(a.work)
    os.makedirs(w, exist_ok=True)
    os.chdir(w)
    run(aa, "data", "synth", "--out", "data", "--bytes", "100000")
    torch.manual_seed(0)
    ids = torch.randint(0, 256, (2, 16))
    ok = True
    for name, (cls, cfg, model, targets, modules, prefix) in MODELS.items():
        base = {"name": name, "model": model, "train": {"global_batch": 4, "steps": 10, "lr": 0.003, "eval_every": 0},
                "data": {"train": "data/train.bin", "val": "data/val.bin"}}
        json.dump(base, open(f"{name}.json", "w"))
        json.dump({"extends": f"{name}.json", "name": f"{name}-lora", "train": {"lr": 0.05},
                   "init_weights": f"{name}-run0/final.ckpt", "lora": {"r": 4, "alpha": 8, "targets": targets}},
                  open(f"{name}-lora.json", "w"))
        run(aa, "train", f"{name}.json", "--threads", "1", "--out", f"{name}-run0")
        run(aa, "train", f"{name}-lora.json", "--threads", "1", "--out", f"{name}-run1")
        os.makedirs(f"{name}-hf", exist_ok=True)
        run(aa, "export", f"{name}-run0/final.ckpt", "--model", f"{name}.json", "--out", f"{name}-hf/model.safetensors")
        cfg.save_pretrained(f"{name}-hf")
        run(aa, "export", f"{name}-run1/final.ckpt", "--model", f"{name}-lora.json", "--peft", "--out", f"{name}-peft")
        run(aa, "export", f"{name}-run1/final.ckpt", "--model", f"{name}-lora.json", "--merge",
            "--out", f"{name}-merged.safetensors")
        # 1. autoaccel's PEFT files in peft.
        with torch.no_grad():
            plain = cls.from_pretrained(f"{name}-hf").eval()
            base_logits = plain(ids).logits
            adapted = PeftModel.from_pretrained(cls.from_pretrained(f"{name}-hf"), f"{name}-peft").eval()(ids).logits
            merged = cls(cfg).eval()
            merged.load_state_dict({prefix + k: v for k, v in load_file(f"{name}-merged.safetensors").items()},
                                   strict=False)
            merged.tie_weights()
            merged_logits = merged(ids).logits
        d, moved = float((adapted - merged_logits).abs().max()), float((adapted - base_logits).abs().max())
        good = d <= 1e-4 and moved > 1e-2
        print(f"{name}: export --peft in peft against export --merge: logits differ by {d:.3g} "
              f"(the adapters move them by {moved:.3g}): {'ok' if good else 'MISMATCH'}")
        ok &= good
        # 2. peft's files in autoaccel.
        lc = LoraConfig(r=4, lora_alpha=8, target_modules=modules, lora_dropout=0.0, task_type="CAUSAL_LM",
                        fan_in_fan_out=name == "gpt2")
        pm = get_peft_model(cls.from_pretrained(f"{name}-hf"), lc)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.2)
        shutil.rmtree(f"{name}-peft2", ignore_errors=True)
        pm.save_pretrained(f"{name}-peft2")
        run(aa, "import", f"{name}-peft2", "--model", f"{name}-lora.json", "--out", f"{name}-imported.ckpt")
        run(aa, "export", f"{name}-imported.ckpt", "--model", f"{name}-lora.json", "--merge",
            "--out", f"{name}-merged2.safetensors")
        theirs = pm.merge_and_unload().state_dict()
        ours = load_file(f"{name}-merged2.safetensors")
        d = max(float((theirs[prefix + k] - v).abs().max()) for k, v in ours.items())
        good = d <= 1e-6
        print(f"{name}: peft's save_pretrained imported, export --merge against merge_and_unload: "
              f"weights differ by {d:.3g}: {'ok' if good else 'MISMATCH'}")
        ok &= good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
