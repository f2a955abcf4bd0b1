"""Varlen attention for QSA on sm_121 (GB10) in Triton, FlashDecoding style.

Grouped-query attention, head dim up to 256, online softmax. cu_seqlens are read on the
device inside the kernel (never copied to the host), so a CUDA graph captured once stays
valid when the backend rewrites the sequence tables in place between replays.
Only the call contract QSA uses is implemented: q [total_q, Hq, D], k/v [total_k, Hk, D],
int32 cu_seqlens_q / cu_seqlens_k, causal masking aligned to the end of each sequence."""

import torch
import triton
import triton.language as tl


@triton.jit
def _varlen_fwd(Q, K, V, O, CU_Q, CU_K, scale,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                GROUP: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    block = tl.program_id(2)
    q_start = tl.load(CU_Q + seq)
    q_len = tl.load(CU_Q + seq + 1) - q_start
    k_start = tl.load(CU_K + seq)
    k_len = tl.load(CU_K + seq + 1) - k_start
    if block * BLOCK_M >= q_len:
        return
    kv_head = head // GROUP
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    d_mask = offs_d < HEAD_DIM
    q = tl.load(Q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=(offs_m[:, None] < q_len) & d_mask[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    # Query row i sees keys up to (k_len - q_len + i) when causal.
    shift = k_len - q_len
    for start_n in range(0, k_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < k_len) & d_mask[None, :]
        k = tl.load(K + (k_start + offs_n)[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale
        valid = offs_n[None, :] < k_len
        if CAUSAL:
            valid = valid & (offs_n[None, :] <= (offs_m[:, None] + shift))
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + (k_start + offs_n)[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        m_i = m_new
    # Rows that saw no key (empty selection) produce zeros, not NaN.
    out = tl.where(l_i[:, None] > 0, acc / tl.where(l_i[:, None] > 0, l_i[:, None], 1.0), 0.0)
    tl.store(O + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=(offs_m[:, None] < q_len) & d_mask[None, :])


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=True, **_unused):
    """Same positional contract as flash_attn.flash_attn_varlen_func for the arguments QSA passes."""
    total_q, heads_q, head_dim = q.shape
    heads_k = k.shape[1]
    if head_dim > 256:
        raise ValueError(f"qsa_fa_fallback: head dim {head_dim} > 256 is not supported")
    if heads_q % heads_k:
        raise ValueError(f"qsa_fa_fallback: {heads_q} query heads are not a multiple of {heads_k} KV heads")
    out = torch.empty_like(q)
    scale = softmax_scale if softmax_scale is not None else head_dim ** -0.5
    block_m = 16 if max_seqlen_q <= 16 else 64
    batch = cu_seqlens_q.numel() - 1
    grid = (batch, heads_q, triton.cdiv(max_seqlen_q, block_m))
    _varlen_fwd[grid](q, k, v, out, cu_seqlens_q, cu_seqlens_k, scale,
                      q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                      out.stride(0), out.stride(1),
                      GROUP=heads_q // heads_k, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=64,
                      HEAD_DIM=head_dim, D_PAD=triton.next_power_of_2(head_dim))
    return out
