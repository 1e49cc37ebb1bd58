"""torch.nn.MultiheadAttention over alk's ops."""
from .. import _C
from . import Linear, Module, Parameter, _caller, _no_grad, functional, init


class MultiheadAttention(Module):
    """PyTorch's MultiheadAttention: in_proj_weight [3E, E] (q, k, v stacked), out_proj, inputs
    [L, N, E] (batch_first: [N, L, E]; or unbatched [L, E]). forward returns (output, weights
    averaged over heads, or per head, or None). attn_mask: bool (True = not attended, as
    PyTorch's MultiheadAttention) or float (added); key_padding_mask [N, S]: True = padding."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False):
        super().__init__()
        if add_bias_kv or add_zero_attn or (kdim not in (None, embed_dim)) or (vdim not in (None, embed_dim)):
            raise NotImplementedError(f"MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim other than "
                                      f"embed_dim are not supported by alk (at {_caller()})")
        if embed_dim % num_heads:
            raise AssertionError(f"embed_dim must be divisible by num_heads (at {_caller()})")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = Parameter(_C.zeros(3 * embed_dim, embed_dim))
        init.xavier_uniform_(self.in_proj_weight)
        self.in_proj_bias = Parameter(_C.zeros(3 * embed_dim)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if bias:
            with _no_grad():
                self.out_proj.bias.zero_()

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        L, N, E = query.shape
        S = key.shape[0]
        H, D = self.num_heads, self.head_dim
        w = self.in_proj_weight
        b = self.in_proj_bias
        wq, wk, wv = w[:E], w[E:2 * E], w[2 * E:]
        bq, bk, bv = (b[:E], b[E:2 * E], b[2 * E:]) if b is not None else (None, None, None)
        q = functional.linear(query, wq, bq).reshape(L, N * H, D).transpose(0, 1)  # [N*H, L, D]
        k = functional.linear(key, wk, bk).reshape(S, N * H, D).transpose(0, 1)
        v = functional.linear(value, wv, bv).reshape(S, N * H, D).transpose(0, 1)
        scores = _C.matmul(q, k.transpose(1, 2)) * (1.0 / D ** 0.5)  # [N*H, L, S]
        if is_causal and attn_mask is None:
            attn_mask = _C.triu(_C.ones(L, S), 1) > 0
        if attn_mask is not None:
            if attn_mask.dtype == _C.dtype.bool:
                scores = _C.where(attn_mask, float("-inf"), scores)
            else:
                scores = scores + attn_mask
        if key_padding_mask is not None:
            pad = key_padding_mask.reshape(N, 1, 1, S)
            scores = scores.reshape(N, H, L, S)
            scores = (_C.where(pad, float("-inf"), scores) if pad.dtype == _C.dtype.bool else scores + pad)
            scores = scores.reshape(N * H, L, S)
        weights = _C.softmax(scores, -1)
        if self.dropout > 0.0 and self.training:
            weights = _C.dropout(weights, self.dropout, True)
        out = _C.matmul(weights, v).transpose(0, 1).reshape(L, N, E)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        weights = weights.reshape(N, H, L, S)
        if average_attn_weights:
            weights = weights.mean(1)
        if unbatched:
            weights = weights.squeeze(0)
        return out, weights
