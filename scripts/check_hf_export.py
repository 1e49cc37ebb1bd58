#!/usr/bin/env python3
"""Checks that a directory `alk export --target hf` wrote loads in transformers and gives the
reference logits (tests/fixtures/hf/reference/<model>.safetensors, made by
scripts/make_hf_fixtures.py with transformers itself).

Run where transformers and torch are installed (the GPU machine), after making the exported
directories with alk (build/alk):

  # 1. Read each transformers-made fixture and write it again (alk's loader and writer):
  for m in gpt2 llama qwen2; do
    build/alk export --target hf --model tests/fixtures/hf/$m --out /tmp/alk_hf_export/$m
  done
  # 2. Fine-tune the fixtures 20 steps, export the run, and let alk write the tuned model's
  #    logits for the reference inputs (the weights changed, so these are the expected values):
  for m in gpt2 llama; do
    build/alk train --init-from tests/fixtures/hf/$m --corpus README.md --steps 20 --ctx 64 --batch 4 --warmup 2 --lr 1e-3 \\
        --eval-every 10 --sample-tokens 0 --device cpu --out /tmp/alk_hf_runs/$m
    build/alk export --target hf --from /tmp/alk_hf_runs/$m --out /tmp/alk_hf_export/$m-tuned
    build/alk eval --from /tmp/alk_hf_runs/$m --logits-for tests/fixtures/hf/reference/$m.safetensors \\
        --logits-out /tmp/alk_hf_export/$m-tuned.logits.safetensors
  done
  # 3. Check them:
  for m in gpt2 llama qwen2; do
    python3 scripts/check_hf_export.py /tmp/alk_hf_export/$m tests/fixtures/hf/reference/$m.safetensors
  done
  for m in gpt2 llama; do
    python3 scripts/check_hf_export.py /tmp/alk_hf_export/$m-tuned /tmp/alk_hf_export/$m-tuned.logits.safetensors
    python3 scripts/check_hf_export.py /tmp/alk_hf_export/$m-tuned --same-as tests/fixtures/hf/$m --expect-different
  done

For a directory exported from the fixture unchanged, the logits must match the reference within
--tol (1e-4 by default: the reference was computed in float32, and an f32 export holds the same
values). With --same-as OTHER_DIR the two directories' logits are compared with each other
instead (--expect-different: they must differ, as after fine-tuning, while both load and give
finite logits). Exit status 0 when every check passes; one line per input either way.
"""
import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def logits_of(model_dir, inputs):
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for ids in inputs:
            out.append(model(ids.unsqueeze(0)).logits[0].float())
    return model, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exported", help="the directory alk export --target hf wrote")
    ap.add_argument("reference", nargs="?", help="tests/fixtures/hf/reference/<model>.safetensors")
    ap.add_argument("--same-as", help="compare with this directory's logits instead of a reference file")
    ap.add_argument("--expect-different", action="store_true", help="with --same-as: the logits must differ")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    if not a.reference and not a.same_as:
        ap.error("give a reference file or --same-as DIR")

    # The tokenizer must load too (transformers reads alk's copy of tokenizer.json).
    AutoTokenizer.from_pretrained(a.exported)
    if a.reference:
        ref = load_file(a.reference)
        n = len([k for k in ref if k.startswith("input_ids.")])
        inputs = [ref[f"input_ids.{i}"] for i in range(n)]
        want = [ref[f"logits.{i}"] for i in range(n)]
    else:
        n = 3
        g = torch.Generator().manual_seed(0)
        vocab = AutoModelForCausalLM.from_pretrained(a.same_as).config.vocab_size
        inputs = [torch.randint(0, vocab, (8 + 4 * i,), generator=g) for i in range(n)]
        _, want = logits_of(a.same_as, inputs)
    model, got = logits_of(a.exported, inputs)

    ok = True
    for i in range(n):
        diff = (got[i] - want[i]).abs().max().item()
        finite = bool(torch.isfinite(got[i]).all())
        if a.expect_different:
            passed = finite and diff > a.tol
        else:
            passed = finite and diff <= a.tol
        ok &= passed
        print(f"{a.exported} input {i} ({inputs[i].numel()} tokens): max |logits - expected| = {diff:.3g} "
              f"{'ok' if passed else 'FAIL'}")
    if a.reference and "greedy.0" in ref:
        for i in range(n):
            prompt = ref[f"input_ids.{i}"].unsqueeze(0)
            greedy = model.generate(prompt, do_sample=False, max_new_tokens=ref[f"greedy.{i}"].numel(),
                                    pad_token_id=model.config.eos_token_id if model.config.pad_token_id is None
                                    else model.config.pad_token_id)[0, prompt.shape[1]:]
            same = greedy.tolist() == ref[f"greedy.{i}"].tolist()[:greedy.numel()]
            ok &= same
            print(f"{a.exported} input {i}: greedy continuation {'equal' if same else 'DIFFERENT'}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
