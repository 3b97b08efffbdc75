# make_fp8_fixture.py: writes a small safetensors file with an FP8 e4m3 weight, its 128x128
# block scales (weight_scale_inv) and torch's float32 dequantization, for glmchat's loader tests.
#
# Usage: python3 make_fp8_fixture.py OUT.safetensors
import sys

import torch
from safetensors.torch import save_file

gen = torch.Generator().manual_seed(7)
rows, cols = 256, 160
bytes_ = torch.arange(rows * cols, dtype=torch.int64) % 256
perm = torch.randperm(rows * cols, generator=gen)
w8 = bytes_[perm].to(torch.uint8).view(torch.float8_e4m3fn).reshape(rows, cols)
scale = (torch.rand((2, 2), generator=gen) * 0.02 + 0.001).float()
w = w8.float()
w = torch.nan_to_num(w, nan=0.0)
exp = w * scale.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
nan_mask = torch.isnan(w8.float()).to(torch.uint8)
save_file({"w.weight": w8.contiguous(), "w.weight_scale_inv": scale.contiguous(),
           "w.expected": exp.contiguous(), "w.is_nan": nan_mask.contiguous(),
           "all_bytes_f32": torch.arange(256, dtype=torch.int64).to(torch.uint8)
           .view(torch.float8_e4m3fn).float().contiguous()},
          sys.argv[1], metadata={"format": "pt"})
