r"""Proof-page text (:class:`~nlaverify.symbolic.statements.OpText`) of the attention ops:
softmax attention (full, causal, sliding window, multi-head, blockwise), kernelized
linear attention and its feature maps (Baggag & Saad §3.4-3.5, §4.3-4.4).

Each JVP statement is the forward-mode dual its ``<op>_jvp`` function computes (the
formulas of those functions' docstrings).
"""

from __future__ import annotations

from nlaverify.symbolic.op_text import OpText as T

_SDPA = (("S", r"the scores $QK^\top/\sqrt{d_k}$ (plus the mask $M$)"),
         ("P", r"the attention weights $\operatorname{softmax}(S)$, row by row"),
         ("dP", r"$GV^\top$, the cotangent of $P$"), ("dS", "the cotangent of $S$"))
_SDPA_JVP = (r"\dot S = \frac{\dot Q K^\top + Q\dot K^\top}{\sqrt{d_k}},\quad \dot P = P\odot"
             r"\bigl(\dot S - \operatorname{rowsum}(\dot S\odot P)\bigr),\quad \dot A = \dot P V"
             r" + P\dot V")
_MASK = (("M", r"the causal mask: $M_{ij} = -\infty$ for $j > i$ (token $i$ sees keys "
               r"$j \le i$), else 0"),)
_KERNEL = (("C", r"$[V, \mathbf 1]$, the values with a column of ones appended"),
           ("Y", r"$Q_f(K_f^\top C)$ (causal: row $i$ is $Q_{f,i}^\top S_i$); its last "
                 "column is the normaliser"),
           ("D", r"$\operatorname{diag}(Y_{:, d_v})$, the normalisers $\sum_j s_{ij}$"),
           ("O", "the output"), (r"\bar Y", "the cotangent of $Y$"),
           (r"Y_{:, :d_v}, Y_{:, d_v}", "the first $d_v$ columns of $Y$ and its last one"))
_KERNEL_JVP = (r"\dot Y = \dot Q_f(K_f^\top C) + Q_f(\dot K_f^\top C) + Q_f(K_f^\top\dot C),"
               r"\quad \dot C = [\dot V, 0],\quad \dot O = D^{-1}\bigl(\dot Y_{:, :d_v} - "
               r"\operatorname{diag}(\dot Y_{:, d_v})\,O\bigr)")
_CAUSAL_KERNEL = (("S_i", r"the prefix sum $\sum_{j\le i} K_{f,j}C_j^\top$"),
                  ("R_j", r"the suffix sum $\sum_{i\ge j} Q_{f,i}\bar Y_i^\top$"),
                  (r"X_{f,i}, C_j, \bar Y_i", "row $i$ (or $j$) of $X_f$, $C$, $\\bar Y$"))
_CAUSAL_KERNEL_JVP = (r"\dot Y_i = S_i^\top\dot Q_{f,i} + \dot S_i^\top Q_{f,i},\quad \dot S_i"
                      r" = \textstyle\sum_{j\le i}\bigl(\dot K_{f,j}C_j^\top + K_{f,j}\dot C_j"
                      r"^\top\bigr),\quad \dot O = D^{-1}\bigl(\dot Y_{:, :d_v} - "
                      r"\operatorname{diag}(\dot Y_{:, d_v})\,O\bigr)")
_FEAT = (("W", "the random projection ($m$ rows, fixed: not differentiated)"),
         ("x", "one row of $X$"), (r"\Phi", "the features, one row per row of $X$"))
_FAVOR = (*_FEAT, ("b", "the random phases (fixed)"),
          (r"\tilde X", r"$X/d^{1/4}$ for $X \in \{Q, K\}$; $\tilde x$ one of its rows"),
          (r"\phi", r"the trig features $\sqrt{2/m}\cos(W\tilde x + b)$"),
          ("D_X", r"$\operatorname{diag}(e^{\lVert\tilde x_i\rVert^2/2})$"),
          ("X_f", r"$D_X\phi(\tilde X)$, the features of $Q$ or $K$ ($Q_f$, $K_f$)"),
          (r"\operatorname{trig\_vjp}, \operatorname{trig\_jvp}", "the VJP and JVP of the "
                                                                  "trig features"))
_PLUS = (*_FEAT, (r"\tilde X", r"$X/d^{1/4}$ for $X \in \{Q, K\}$; $\tilde x$ one of its rows"),
         ("Z_X", r"$\tilde X W^\top - \tfrac12\lVert\tilde x\rVert^2\mathbf 1^\top$ (row by "
                 "row)"),
         ("X_f", r"$e^{Z_X - c}/\sqrt m$, the positive features of $Q$ or $K$"),
         ("c", "the stability shift (set to 0 in the shown entry: it cancels)"),
         (r"\bar Z", "the cotangent of $Z_X$"))
_ELU = ((r"\phi", r"$\operatorname{elu} + 1$: $x + 1$ for $x > 0$, $e^x$ for $x \le 0$; "
                  r"$\phi'$ its derivative"), (r"Q_f, K_f", r"$\phi(Q)$, $\phi(K)$"))
_KERNEL_TAIL = r",\ \text{then the kernel-attention JVP}"
_LIN = {"m": "features per query/key row"}
_RF = {"m": "random features"}
_BLOCK = (("b", "a key block (sizes 2 and 1 in the check)"),
          ("S_b", r"$QK_b^\top/\sqrt{d_k}$, the scores of block $b$"),
          ("m, m_b", "the running and the block's row maxima"),
          (r"\ell", r"the row normaliser $\sum_b e^{m_b - m}\operatorname{rowsum}(e^{S_b - m_b})$"),
          ("P_b", r"block $b$ of the attention weights ($e^{S_b - m}/\ell$)"),
          ("K_b, V_b", "the keys and values of block $b$"), ("dS_b", "the cotangent of $S_b$"))
_BLOCK_JVP = (r"\dot S_b = \frac{\dot Q K_b^\top + Q\dot K_b^\top}{\sqrt{d_k}},\quad "
              r"\dot A = \textstyle\sum_b\bigl((P_b\odot\dot S_b)V_b + P_b\dot V_b\bigr) - "
              r"\operatorname{diag}\bigl(\textstyle\sum_b\operatorname{rowsum}(P_b\odot"
              r"\dot S_b)\bigr)A")
_BLOCK_FWD = (r"A = \frac{\sum_b e^{m_b - m}\,e^{S_b - m_b}V_b}{\sum_b e^{m_b - m}\,e^{S_b - "
              r"m_b}\mathbf 1} = \operatorname{softmax}\Bigl(\frac{QK^\top}{\sqrt{d_k}} + M"
              r"\Bigr)V")

ATTENTION_TEXT: dict[str, T] = {
    "attention": T("A", r"A = \operatorname{softmax}\Bigl(\frac{QK^\top}{\sqrt{d_k}}\Bigr)V",
                   _SDPA_JVP, _SDPA),
    "attention_mup": T("A", r"A = \operatorname{softmax}\Bigl(\frac{QK^\top}{d_k}\Bigr)V",
                       _SDPA_JVP.replace(r"\sqrt{d_k}", "d_k"),
                       tuple((k, v.replace("sqrt(d_k)", "d_k").replace(r"\sqrt{d_k}", "d_k"))
                             for k, v in _SDPA)),
    "causal_attention": T("A", r"A = \operatorname{softmax}\Bigl(\frac{QK^\top}{\sqrt{d_k}} "
                               r"+ M\Bigr)V", _SDPA_JVP + r",\quad P_{ij} = 0 \text{ for } j > i",
                          (*_SDPA, *_MASK)),
    "causal_attention_kv": T(
        "A", r"A = \operatorname{softmax}\Bigl(\frac{QK^\top}{\sqrt{d_k}} + M\Bigr)V,\quad "
             r"M_{ij} = 0 \text{ if } j \le i + n_k - n,\ -\infty \text{ otherwise}",
        _SDPA_JVP + r",\quad P_{ij} = 0 \text{ for } j > i + n_k - n",
        (*_SDPA, ("M", "the causal mask aligned bottom-right (static `align`)"),
         ("n, n_k", r"the numbers of queries and of keys, $n_k \ge n$ (2 and 3 in the check)"))),
    "sliding_window_attention": T(
        "A", r"A = \operatorname{softmax}\Bigl(\frac{QK^\top}{\sqrt{d_k}} + M\Bigr)V,\quad "
             r"M_{ij} = 0 \text{ if } i - w < j \le i,\ -\infty \text{ otherwise}",
        _SDPA_JVP + r",\quad P_{ij} = 0 \text{ unless } i - w < j \le i",
        (*_SDPA, ("M", "the sliding-window mask"),
         ("w", "the window (static `window`, 2 in the check: the query's own position and "
               "one before)"))),
    "multihead_attention": T(
        "Y", r"Y = \operatorname{merge}(A)\,W_O,\quad A_k = \operatorname{attention}(Q_k, K_k, "
             r"V_k),\quad U = \operatorname{split}(XW_U)\ (U \in \{Q, K, V\})",
        r"\dot U = \operatorname{split}(\dot X W_U + X\dot W_U),\quad \dot A = "
        r"\operatorname{attention\_jvp}(\dot Q, \dot K, \dot V),\quad \dot Y = "
        r"\operatorname{merge}(\dot A)\,W_O + \operatorname{merge}(A)\,\dot W_O",
        (("U_k, A_k", "head $k$ of $U$ and of the attention output $A$ (2 heads, causal, in "
                      "the check)"), (r"\bar U", "the cotangent of $U$"),
         (r"\operatorname{attention\_jvp}", "the JVP of causal softmax attention")),
        {"hd": "features (2 heads of 1)"}),
    "kernel_attention": T(
        "O", r"O = D^{-1}(Q_f K_f^\top)V,\quad D = \operatorname{diag}(Q_f K_f^\top\mathbf 1)"
             r"\ \text{(computed as } Y = Q_f(K_f^\top C),\ O = Y_{:, :d_v}/Y_{:, d_v})",
        _KERNEL_JVP, _KERNEL, _LIN),
    "causal_kernel_attention": T(
        "O", r"O = D^{-1}\bigl((Q_f K_f^\top)\circ M\bigr)V,\quad M_{ij} = \mathbb 1[j \le i]"
             r"\ \text{(by prefix sums } Y_i = Q_{f,i}^\top S_i)",
        _CAUSAL_KERNEL_JVP, (*_KERNEL, *_CAUSAL_KERNEL, ("M", "the lower-triangular 0/1 "
                                                              "mask")), _LIN),
    "favor_attention": T(
        "O", r"O = \operatorname{kernel\_attention}(Q_f, K_f, V),\quad X_f = D_X\,\phi(\tilde X)"
             r",\quad \tilde X = X/d^{1/4}\ (X \in \{Q, K\})",
        r"\dot X_f = D_X\operatorname{trig\_jvp}(\dot{\tilde X}) + \operatorname{diag}(\langle"
        r"\tilde x_i, \dot{\tilde x}_i\rangle)X_f" + _KERNEL_TAIL, _FAVOR, _RF),
    "causal_favor_attention": T(
        "O", r"O = \operatorname{causal\_kernel\_attention}(Q_f, K_f, V),\quad X_f = D_X\,"
             r"\phi(\tilde X),\quad \tilde X = X/d^{1/4}\ (X \in \{Q, K\})",
        r"\dot X_f = D_X\operatorname{trig\_jvp}(\dot{\tilde X}) + \operatorname{diag}(\langle"
        r"\tilde x_i, \dot{\tilde x}_i\rangle)X_f" + _KERNEL_TAIL + r"\ \text{(causal)}",
        _FAVOR, _RF),
    "favor_plus_attention": T(
        "O", r"O = \operatorname{kernel\_attention}(Q_f, K_f, V),\quad X_f = e^{Z_X - c}/\sqrt m"
             r"\ (X \in \{Q, K\})",
        r"\dot X_f = X_f\odot\bigl(\dot{\tilde X}W^\top - \langle\tilde x, \dot{\tilde x}"
        r"\rangle\mathbf 1^\top\bigr)" + _KERNEL_TAIL, _PLUS, _RF),
    "causal_favor_plus_attention": T(
        "O", r"O = \operatorname{causal\_kernel\_attention}(Q_f, K_f, V),\quad X_f = e^{Z_X - c}"
             r"/\sqrt m\ (X \in \{Q, K\})",
        r"\dot X_f = X_f\odot\bigl(\dot{\tilde X}W^\top - \langle\tilde x, \dot{\tilde x}"
        r"\rangle\mathbf 1^\top\bigr)" + _KERNEL_TAIL + r"\ \text{(causal)}", _PLUS, _RF),
    "elu1_attention": T(
        "O", r"O = D^{-1}\bigl(\phi(Q)\phi(K)^\top\bigr)V,\quad D = \operatorname{diag}"
             r"\bigl(\phi(Q)\phi(K)^\top\mathbf 1\bigr)",
        r"\dot Q_f = \phi'(Q)\odot\dot Q,\ \dot K_f = \phi'(K)\odot\dot K" + _KERNEL_TAIL,
        (*_ELU, ("D", "the diagonal of the row normalisers"),
         (r"\bar Q_f, \bar K_f", "the cotangents of the features")), {"d": "features"}),
    "causal_elu1_attention": T(
        "O", r"O = D^{-1}\bigl((\phi(Q)\phi(K)^\top)\circ M\bigr)V,\quad M_{ij} = \mathbb 1"
             r"[j \le i]",
        r"\dot Q_f = \phi'(Q)\odot\dot Q,\ \dot K_f = \phi'(K)\odot\dot K" + _KERNEL_TAIL
        + r"\ \text{(causal)}",
        (*_ELU, ("D", "the diagonal of the row normalisers"),
         ("M", "the lower-triangular 0/1 mask"),
         (r"\bar Q_f, \bar K_f", "the cotangents of the features"))),
    "elu1": T("y", r"y = \operatorname{elu}(x) + 1 = \begin{cases} x + 1 & x > 0\\ e^{x} & "
                   r"x \le 0\end{cases}",
              r"\dot y = \bigl(\mathbb 1[x>0] + e^{x}\,\mathbb 1[x\le 0]\bigr)\odot\dot x",
              (("g", "the cotangent entry matching $x$"),),
              note="The op acts entry by entry: its Jacobian is diagonal, so the d = 2 "
                   "entries are checked independently (each on both branches of the "
                   "piecewise expression)."),
    "trig_features": T(r"\Phi", r"\Phi = \sqrt{2/m}\,\cos(XW^\top + \mathbf 1 b^\top)",
                       r"\dot\Phi = -\sqrt{2/m}\,\sin(XW^\top + \mathbf 1 b^\top)\odot"
                       r"(\dot X W^\top)", (*_FEAT, ("b", "the random phases (fixed)")), _RF),
    "positive_features": T(
        r"\Phi", r"\Phi = e^{Z}/\sqrt m,\quad Z = XW^\top - \tfrac12\operatorname{rowsum}"
                 r"(X\odot X)\mathbf 1^\top",
        r"\dot\Phi = \Phi\odot\bigl(\dot X W^\top - \langle x, \dot x\rangle\mathbf 1^\top"
        r"\bigr)", (*_FEAT, ("Z", "the exponent"), (r"\bar Z", "the cotangent of $Z$")), _RF),
    "hyperbolic_features": T(
        r"\Phi", r"\Phi = \frac{e^{-\lVert x\rVert^2/2}}{\sqrt{2m}}\bigl[e^{U}, e^{-U}\bigr],"
                 r"\quad U = XW^\top\ \text{(row by row)}",
        r"\dot\Phi = \Phi\odot\bigl([\dot U, -\dot U] - \langle x, \dot x\rangle\mathbf 1^\top"
        r"\bigr),\quad \dot U = \dot X W^\top",
        (*_FEAT, ("U", "the projections $XW^\top$"),
         (r"\bar E, \bar E_\pm", r"$G\odot\Phi$ and its two halves (the $e^{U}$ and "
                                 r"$e^{-U}$ features)")), _RF),
    "efficient_attention": T(
        "O", r"O = P_Q X,\quad X = P_K^\top V,\quad P_Q = \operatorname{softmax}_{\mathrm{rows}}"
             r"(Q),\quad P_K = \operatorname{softmax}_{\mathrm{cols}}(K)",
        r"\dot P_Q = P_Q\odot\bigl(\dot Q - \operatorname{rowsum}(\dot Q\odot P_Q)\mathbf 1^\top"
        r"\bigr),\ \dot P_K \text{ likewise by columns},\ \dot X = \dot P_K^\top V + P_K^\top"
        r"\dot V,\ \dot O = \dot P_Q X + P_Q\dot X",
        (("P_Q, P_K", "the softmax of each row of $Q$, of each column of $K$"),
         ("X", r"the context $P_K^\top V$ (an intermediate, not an argument); $\bar X$ its "
               "cotangent"),
         (r"\operatorname{softmax\_vjp}_{\mathrm{rows}}, \operatorname{softmax\_vjp}"
          r"_{\mathrm{cols}}", "the softmax VJP by rows, by columns"))),
    "linformer_attention": T(
        "O", r"O = P\tilde V,\quad P = \operatorname{softmax}\Bigl(\frac{Q\tilde K^\top}"
             r"{\sqrt d}\Bigr),\quad \tilde K = EK,\quad \tilde V = FV",
        r"\dot{\tilde K} = \dot E K + E\dot K,\ \dot{\tilde V} = \dot F V + F\dot V,\ \dot S = "
        r"(\dot Q\tilde K^\top + Q\dot{\tilde K}^\top)/\sqrt d,\ \dot P = P\odot(\dot S - "
        r"\operatorname{rowsum}(\dot S\odot P)),\ \dot O = \dot P\tilde V + P\dot{\tilde V}",
        (("E, F", "the key and value projections (k x n), differentiated"),
         (r"\tilde K, \tilde V", "the projected keys and values"),
         ("S, P", r"the scores $Q\tilde K^\top/\sqrt d$ and their row softmax"),
         ("dS", r"the cotangent of $S$ (with $1/\sqrt d$ folded in)"))),
    "blockwise_attention": T("A", _BLOCK_FWD, _BLOCK_JVP, (*_BLOCK, ("M", "0 (no mask)"))),
    "causal_blockwise_attention": T(
        "A", _BLOCK_FWD, _BLOCK_JVP + r",\quad P_{ij} = 0 \text{ for } j > i",
        (*_BLOCK, *_MASK)),
}
