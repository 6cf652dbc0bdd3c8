"""What torch_npu's fused MoE dispatch/combine accept, per Atlas product, as op-plugin documents them
(the lines relied on: tests/data/op_plugin/moe_distribute_limits.txt). No torch here: the driver
(kinds/expert.py) refuses a case outside them without loading torch_npu, the ranks judge the rest."""
from __future__ import annotations

import os

CHIPS = ("A2", "A3")                     # collectives.backends.hccl.hccl_product's names
EP_SIZES = {"A2": (16, 32, 64), "A3": (8, 16, 32, 64, 128, 144, 256, 288)}   # ep_world_size
MAX_TOKENS = {"A2": 256, "A3": 512}      # BS: tokens a rank sends
MAX_TOPK = {"A2": 16, "A3": 8}           # K
A3_HIDDEN = 7168                         # H on A3: 7168 only; on A2 (0, 7168], a multiple of 32
MAX_EXPERTS = 512                        # moe_expert_num in [1, 512]
A2_MAX_LOCAL_EXPERTS = 24                # A2: moe_expert_num / ep_world_size <= 24
DTYPES = ("bfloat16", "float16")         # x
DEFAULT_BUFFSIZE_MB = 200.0              # HCCL_BUFFSIZE unset (CANN)
MB = 1024 * 1024


def buffsize_needed_mb(chip: str, tokens: int, ep: int, local_experts: int, topk: int, hidden: int) -> float:
    """HCCL_BUFFSIZE's documented minimum (MB) for one rank's BS=tokens (the bench has no shared experts).
    A2: 2 x (BS x ep x min(local, K) x H x sizeof(uint16) + 2 MB);
    A3: >= 2 and 1024^2 x (HCCL_BUFFSIZE - 2) / 2 >= BS x 2 x (H + 128) x (ep x local + K + 1)."""
    if chip == "A2":
        return 2 * (tokens * ep * min(local_experts, topk) * hidden * 2 / MB + 2)
    return 2 + 2 * tokens * 2 * (hidden + 128) * (ep * local_experts + topk + 1) / MB


def buffsize_mb(env: dict[str, str] | None = None) -> float:
    """HCCL_BUFFSIZE (MB) as the ranks will see it; its default when unset or not a number."""
    value = (os.environ if env is None else env).get("HCCL_BUFFSIZE", "")
    try:
        return float(value) if value.strip() else DEFAULT_BUFFSIZE_MB
    except ValueError:
        return DEFAULT_BUFFSIZE_MB


def refusal(chip: str, *, ep: int, experts: int, topk: int, hidden: int, tokens: int, dtype: str,
            distinct: bool, capacity_factor: float, buffsize: float | None, masked: bool = False) -> str:
    """Why the fused ops cannot run this case on `chip` ('' when they can). chip '' (not known yet):
    only what holds on both A2 and A3 is judged (the ranks judge the rest on their chip);
    buffsize None: HCCL_BUFFSIZE not judged."""
    doc = "op-plugin's npu_moe_distribute_dispatch/combine"
    if chip and chip not in CHIPS:
        return f"{doc} are documented for Atlas A2 and A3 only, not {chip}"
    if dtype not in DTYPES:
        return f"{doc} take bfloat16 or float16 tokens, not {dtype} (--moe-dtype bfloat16)"
    if masked:
        return f"{doc} take no masked selection (x_active_mask is reserved, unused; an expert id must be in [0, E))"
    if not distinct:
        return f"{doc} forbid one expert twice in a token's top-k; this routing can repeat one (use uniform or random)"
    if capacity_factor:
        return f"{doc} have no expert capacity: capacity factor {capacity_factor:g} is not theirs (use 0)"
    names = [chip] if chip else list(CHIPS)
    where = chip or "A2 or A3"
    if all(ep not in EP_SIZES[c] for c in names):
        return f"{doc} take an ep group of {' / '.join(f'{c}: {sizes}' for c in names for sizes in [EP_SIZES[c]])}, not {ep}"
    if not 1 <= experts <= MAX_EXPERTS or experts % ep:
        return f"{doc} take 1-{MAX_EXPERTS} experts, a multiple of ep={ep}, not {experts}"
    if chip == "A2" and experts // ep > A2_MAX_LOCAL_EXPERTS:
        return f"{doc} on A2 hold at most {A2_MAX_LOCAL_EXPERTS} experts a rank, not {experts // ep}"
    if all(not 0 < topk <= min(MAX_TOPK[c], experts) for c in names):
        return f"{doc} on {where} take top-k 1-{max(MAX_TOPK[c] for c in names)} (and <= experts), not {topk}"
    if all(not 0 < tokens <= MAX_TOKENS[c] for c in names):
        return f"{doc} on {where} send 1-{max(MAX_TOKENS[c] for c in names)} tokens a rank, not {tokens}"
    if chip == "A3" and hidden != A3_HIDDEN:
        return f"{doc} on A3 take hidden size {A3_HIDDEN} only, not {hidden} (--hidden {A3_HIDDEN})"
    if not 0 < hidden <= A3_HIDDEN or (chip != "A3" and hidden % 32):
        return f"{doc} take hidden sizes up to {A3_HIDDEN}, a multiple of 32 (A3: {A3_HIDDEN} only), not {hidden}"
    if chip and buffsize is not None:
        need = buffsize_needed_mb(chip, tokens, ep, experts // ep, topk, hidden)
        if buffsize < need:
            return (f"{doc} on {chip} need HCCL_BUFFSIZE >= {need:.0f} MB at this shape, it is {buffsize:g} "
                    f"(--knobs HCCL_BUFFSIZE={int(need) + 1})")
    return ""
