"""Runs the GPU anchor (../shared/anchors/torch_gpt2_cuda.py, path as argv[1]) mode by mode, as
its own main does, and after each mode prints PyTorch's peak allocated memory:
    peak_mem <mode> <dtype> <GB>
so bench_gpt2 can print the peak-memory RATIO beside the time one from the same run. The
anchor is imported, not copied: its model, step and timing are the ones measured."""
import importlib.util, sys
import torch

spec = importlib.util.spec_from_file_location("torch_gpt2_cuda", sys.argv[1])
anchor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(anchor)  # defines GPT and bench; its __main__ block does not run

torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True
for mode, dt in [('eager', torch.bfloat16), ('compile', torch.bfloat16), ('eager', torch.float32)]:
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    try: anchor.bench(mode, dt, 16, 1024)
    except Exception as e: print(mode, dt, 'FAILED', repr(e)[:300], flush=True); continue
    print(f"peak_mem {mode} {dt} {torch.cuda.max_memory_allocated() / 1e9:.2f}", flush=True)
