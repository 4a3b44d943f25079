"""normlab_torch_train: the oracle's trainer: AdamW with normlab's weight-decay grouping, the LR
schedules (lr_factor), gradient clipping, and train(), which steps on one fixed batch.

Part of the PyTorch oracle; normlab_torch.py is the entry point and lists the whole API.
"""

import math

import torch

import normlab_torch_forward
from normlab_torch_config import METHODS
from normlab_torch_forward import forward
from normlab_torch_params import project_to_sphere


# --------------------------------------------------------------------------------------------------
# Training: AdamW, LR schedule, grad clipping
# --------------------------------------------------------------------------------------------------

TRAIN_DEFAULTS = {
    "lr": 1e-3,
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "min_lr": 0.0,
    "weight_decay": 0.0,
    "beta1": 0.9,
    "beta2": 0.999,
    "adam_eps": 1e-8,
    "grad_clip": 0.0,
    "qk_clip": 0.0,
    "qk_clip_alpha": 0.5,
}


def lr_factor(tc, t):
    """f(t), t = 1-based step; the lr used at that step is lr * f(t)."""
    sched, w = tc["lr_schedule"], int(tc["warmup_steps"])
    if sched == "constant":
        return 1.0
    if sched == "warmup":
        return 1.0 if w <= 0 else min(1.0, t / w)
    if sched == "invsqrt":
        if w <= 0:
            raise ValueError("invsqrt needs warmup_steps > 0")
        return min(t / w, math.sqrt(w / t))
    if sched == "cosine":
        if w > 0 and t <= w:
            return t / w
        steps = int(tc["steps"])
        min_ratio = tc["min_lr"] / tc["lr"]
        return min_ratio + 0.5 * (1.0 - min_ratio) * (1.0 + math.cos(math.pi * (t - w) / (steps - w)))
    raise ValueError(f"unknown lr_schedule {sched!r}")


def make_optimizer(model, train_cfg):
    tc = dict(TRAIN_DEFAULTS)
    tc.update(train_cfg)
    # "weight_decay: on embeddings and linear weights only" (configs/example.toml): the 2-D tensors
    # (hyper-connections' parameters, ".hc.", are gates and maps of the streams: none decays)
    decay = [p for n, p in model.params.items() if p.dim() == 2 and ".hc." not in n]  # wte, wpe, enc.*, linear weights
    no_decay = [p for n, p in model.params.items() if p.dim() != 2 or ".hc." in n]    # biases, norm gains/biases, omega, gain, rezero
    groups = [{"params": decay, "weight_decay": float(tc["weight_decay"])}, {"params": no_decay, "weight_decay": 0.0}]
    c = model.config
    if c.get("mup_base_width", 0) > 0:
        # mup.MuAdamW: a matrix-like parameter (both dimensions infinite: a block's linear weight, not a
        # head-wise gate's (heads x C)) in a group of lr / width_mult and weight_decay x width_mult
        m = c["d_model"] / c["mup_base_width"]
        def matrix_like(name, p):
            return p.dim() == 2 and name.startswith("h.") and ".hc." not in name and not (
                name.endswith(".attn.gate.weight") and c.get("attn_gate") == "headwise")
        hidden = [p for n, p in model.params.items() if matrix_like(n, p)]
        rest = [p for n, p in model.params.items() if p.dim() == 2 and ".hc." not in n and not matrix_like(n, p)]
        groups = [{"params": rest, "weight_decay": float(tc["weight_decay"])},  # (group 0's lr is the one recorded)
                  {"params": no_decay, "weight_decay": 0.0},
                  {"params": hidden, "weight_decay": float(tc["weight_decay"]) * m, "lr": float(tc["lr"]) / m}]
    eps = float(tc["adam_eps"])
    if c.get("completep_base_depth", 0) > 0:
        # nanoGPT-mup's completep branch: adam_eps *= (1 / mup_width_multiplier) * depth_multiplier ** -alpha, alpha 1
        width = c["d_model"] / c["mup_base_width"] if c.get("mup_base_width", 0) > 0 else 1.0
        eps *= 1.0 / width * (c["n_layers"] / c["completep_base_depth"]) ** -1.0
    opt = torch.optim.AdamW(
        groups,
        lr=float(tc["lr"]), betas=(float(tc["beta1"]), float(tc["beta2"])), eps=eps,
    )
    # LambdaLR evaluates the lambda at last_epoch = 0, 1, ... (0-based step s); we want f(s + 1).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(tc, s + 1))
    return opt, sched


def global_grad_norm(params):
    return math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params if p.grad is not None))


def clip_qk(model, tau, alpha):
    """QK-Clip after the optimizer step, as Megatron-LM's grouped form writes it (Kimi K2's per-head rule
    when every query head has its own key head): per key-value group, eta = min(1, tau / the largest
    score of its query heads); the group's query rows of the fused qkv map (weights and bias) times
    eta^alpha, its key rows times eta^(1 - alpha). Returns the number of groups with eta < 1."""
    c = model.config
    NH, KVH = c["n_heads"], c["n_kv_heads"]
    HS = c["d_model"] // NH
    G = NH // KVH
    clipped = 0
    with torch.no_grad():
        for prefix, m in normlab_torch_forward.LOGIT_MAX.items():
            grouped = m.reshape(KVH, G).amax(dim=1)
            for g in range(KVH):
                if float(grouped[g]) <= tau:
                    continue
                eta = tau / float(grouped[g])
                for name in (prefix + ".qkv.weight", prefix + ".qkv.bias"):
                    if name not in model.params:
                        continue
                    w = model.params[name]
                    w[g * G * HS:(g + 1) * G * HS] *= eta ** alpha
                    w[NH * HS + g * HS:NH * HS + (g + 1) * HS] *= eta ** (1 - alpha)
                clipped += 1
    return clipped


def train(model, input_ids, labels, train_cfg, **inputs):
    """Train on the same fixed batch every step; returns one record per step (1-based "step").
    inputs: the batch's other forward inputs (token_types, key_mask, decoder_input_ids, decoder_mask)."""
    tc = dict(TRAIN_DEFAULTS)
    tc.update(train_cfg)
    opt, sched = make_optimizer(model, tc)
    params = model.parameters()
    placement = model.config["placement"] if isinstance(model.config["placement"], list) else [model.config["placement"]]
    records = []
    for s in range(int(tc["steps"])):
        lr_now = opt.param_groups[0]["lr"]
        opt.zero_grad(set_to_none=True)
        if tc["qk_clip"] > 0:
            normlab_torch_forward.LOGIT_MAX = {}
        loss, _ = forward(model, input_ids, labels, **inputs)
        loss.backward()
        if tc["grad_clip"] > 0:
            gn = float(torch.nn.utils.clip_grad_norm_(params, float(tc["grad_clip"])))
        else:
            gn = global_grad_norm(params)
        opt.step()
        sched.step()
        if any(METHODS[q].sphere for q in placement):   # nGPT: the matrices back onto the sphere
            project_to_sphere(model.config, model.params)
        record = {"step": s + 1, "loss": float(loss.detach()), "lr": lr_now, "grad_norm": gn}
        if tc["qk_clip"] > 0:
            record["max_logit"] = max(float(m.max()) for m in normlab_torch_forward.LOGIT_MAX.values())
            record["qk_clipped"] = clip_qk(model, float(tc["qk_clip"]), float(tc["qk_clip_alpha"]))
            normlab_torch_forward.LOGIT_MAX = None
        records.append(record)
    return records
