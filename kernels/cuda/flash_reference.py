#!/usr/bin/python3
# The tile loops of kernels/cuda/cuda_attention.cu transliterated to numpy
# (a warp is a vector of its 32 lanes), checked against PyTorch float64
# attention. It checks the algorithm (online softmax, causal tile bounds,
# the D = rowsum(P * dP) pass, the dk/dv query-tile loop) where no GPU is at
# hand; the CUDA code itself is checked by tests/test_cuda_ops.c on a GPU.
# Keep the two in step when the tiling changes.
#
#   /usr/bin/python3 kernels/cuda/flash_reference.py   (exit 1 on a mismatch)
import numpy as np
R, TILE, RPW, WARPS = 16, 32, 4, 4
def fwd(qkv, B, T, C, NH):
    hs = C // NH; sc = 1/np.sqrt(hs)
    out = np.zeros((B, T, C), np.float32); lse = np.zeros((B, NH, T), np.float32)
    for b in range(B):
      for h in range(NH):
        Q = qkv[b, :, h*hs:(h+1)*hs]; K = qkv[b, :, C+h*hs:C+(h+1)*hs]; V = qkv[b, :, 2*C+h*hs:2*C+(h+1)*hs]
        for t0 in range(0, T, R):
          tl = min(t0+R, T)-1
          st = {}
          for s0 in range(0, tl+1, TILE):
            Ks = np.zeros((TILE, hs), np.float32); Vs = np.zeros((TILE, hs), np.float32)
            n = min(TILE, T-s0); Ks[:n] = K[s0:s0+n]; Vs[:n] = V[s0:s0+n]
            for i in range(R):
              t = t0+i
              if t >= T: continue
              m, l, acc = st.get(i, (-np.inf, 0.0, np.zeros(hs, np.float32)))
              s = s0 + np.arange(32)
              score = np.where(s <= t, Ks @ Q[t] * sc, -np.inf)
              tm = score.max()
              if tm == -np.inf: continue
              mn = max(m, tm)
              p = np.where(s <= t, np.exp(score - mn), 0)
              corr = np.exp(m - mn)
              l = l*corr + p.sum(); acc = acc*corr + p @ Vs
              st[i] = (mn, l, acc)
          for i in range(R):
            t = t0+i
            if t >= T: continue
            m, l, acc = st[i]
            out[b, t, h*hs:(h+1)*hs] = acc/l; lse[b, h, t] = m + np.log(l)
    return out, lse
def bwd(dout, qkv, lse, B, T, C, NH):
    hs = C // NH; sc = 1/np.sqrt(hs)
    dqkv = np.zeros_like(qkv); Dbuf = np.zeros((B, NH, T))
    for b in range(B):
      for h in range(NH):
        Q = qkv[b, :, h*hs:(h+1)*hs]; K = qkv[b, :, C+h*hs:C+(h+1)*hs]; V = qkv[b, :, 2*C+h*hs:2*C+(h+1)*hs]
        dO = dout[b, :, h*hs:(h+1)*hs]
        for t0 in range(0, T, R):
          tl = min(t0+R, T)-1
          D = np.zeros(R); dq = np.zeros((R, hs))
          for ps in range(2):
            for s0 in range(0, tl+1, TILE):
              Ks = np.zeros((TILE, hs)); Vs = np.zeros((TILE, hs))
              n = min(TILE, T-s0); Ks[:n] = K[s0:s0+n]; Vs[:n] = V[s0:s0+n]
              for i in range(R):
                t = t0+i
                if t >= T or s0 > t: continue
                s = s0 + np.arange(32)
                p = np.where(s <= t, np.exp(Ks @ Q[t]*sc - lse[b, h, t]), 0)
                dp = np.where(s <= t, Vs @ dO[t], 0)
                if ps == 0: D[i] += (p*dp).sum(); continue
                ds = p*(dp - D[i])*sc
                dq[i] += ds @ Ks
          for i in range(R):
            t = t0+i
            if t < T: dqkv[b, t, h*hs:(h+1)*hs] += dq[i]; Dbuf[b, h, t] = D[i]
        for s0 in range(0, T, R):
          dk = np.zeros((R, hs)); dv = np.zeros((R, hs))
          for q0 in range(s0, T, TILE):
            Qs = np.zeros((TILE, hs)); dOs = np.zeros((TILE, hs)); Ls = np.zeros(TILE); Ds = np.zeros(TILE)
            n = min(TILE, T-q0); Qs[:n] = Q[q0:q0+n]; dOs[:n] = dO[q0:q0+n]; Ls[:n] = lse[b, h, q0:q0+n]; Ds[:n] = Dbuf[b, h, q0:q0+n]
            for i in range(R):
              s = s0+i
              if s >= T: continue
              t = q0 + np.arange(32)
              valid = (t < T) & (t >= s)
              p = np.where(valid, np.exp(Qs @ K[s]*sc - Ls), 0)
              dp = dOs @ V[s]
              ds = np.where(valid, p*(dp - Ds)*sc, 0)
              dv[i] += p @ dOs; dk[i] += ds @ Qs
          for i in range(R):
            s = s0+i
            if s < T: dqkv[b, s, C+h*hs:C+(h+1)*hs] += dk[i]; dqkv[b, s, 2*C+h*hs:2*C+(h+1)*hs] += dv[i]
    return dqkv
import sys
import torch
worst = 0.0
for (B, T, C, NH) in [(2, 7, 48, 3), (2, 33, 48, 3), (1, 100, 48, 3), (1, 70, 160, 2)]:
    rng = np.random.default_rng(0)
    qkv = rng.uniform(-2, 2, (B, T, 3*C)).astype(np.float32); dout = rng.uniform(-1, 1, (B, T, C)).astype(np.float32)
    out, lse = fwd(qkv, B, T, C, NH); dq = bwd(dout, qkv, lse, B, T, C, NH)
    x = torch.tensor(qkv, dtype=torch.float64, requires_grad=True); hs = C//NH
    q, k, v = x.split(C, 2)
    f = lambda z: z.view(B, T, NH, hs).transpose(1, 2)
    att = (f(q) @ f(k).transpose(-1, -2)) / np.sqrt(hs)
    att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float('-inf'))
    ref_lse = torch.logsumexp(att, -1)
    y = (att.softmax(-1) @ f(v)).transpose(1, 2).reshape(B, T, C)
    y.backward(torch.tensor(dout, dtype=torch.float64))
    print(B, T, C, NH, "out", np.abs(out - y.detach().numpy()).max(), "lse", np.abs(lse - ref_lse.detach().numpy()).max(),
          "dqkv", np.abs(dq - x.grad.numpy()).max() / np.abs(x.grad.numpy()).max())
    worst = max(worst, np.abs(dq - x.grad.numpy()).max() / np.abs(x.grad.numpy()).max(),
                np.abs(out - y.detach().numpy()).max(), np.abs(lse - ref_lse.detach().numpy()).max())
# fp32 tiles against float64: a few 1e-7 is rounding; 1e-5 would be a bug.
print("worst", worst)
sys.exit(0 if worst < 1e-5 else 1)
