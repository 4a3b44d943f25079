"""normlab_torch: an independent PyTorch implementation of the normlab model (docs/MODEL.md).

This is the oracle the C++ engine is checked against, so it is written for readability, not speed:
every formula is spelled out as in MODEL.md, attention is written by hand, and there is no dropout
(the configurations that are checked use dropout 0; a non-zero dropout is rejected).

Architectures: `gpt` (causal), `encoder` (bidirectional) and `encdec` (an encoder stack over the
source, a decoder stack with cross-attention over the target). Methods (the values of `placement`):
post pre sandwich prepost deepnorm none admin rezero skipinit layerscale tfixup residual (MODEL.md,
"Methods"); residual (ResiDual) carries a second stream through its stack (run_stack).

This file is the oracle's entry point: `import normlab_torch as nt` gives the whole API below. The
code lives in five modules, each importing only the ones listed before it:

normlab_torch_config.py      token ids, the METHODS table, the config and its layer stacks
    normalize_config(cfg)            -> config dict with every key explicit (as in checkpoint metadata)
    stacks(config)                   -> [Stack]: the layer stacks (one, or encoder + decoder for encdec)
normlab_torch_hyper.py       hyper-connections (model.hyper): their parameters, init and n-stream stack
    hyper_param_specs(config, pre)   -> [(name, shape)] of a sub-layer's hyper-connection
    hyper_init(config, name, shape, normal) -> its initial value
    run_hyper_stack(config, params, subs, x, sublayer_parts, hidden) -> the sum of the streams
normlab_torch_params.py      the parameter table, initialization, Model and checkpoints
    Model(config, dtype)             -> .config, .params (OrderedDict name -> Parameter, canonical order)
    load_checkpoint(path, dtype)     -> (model, config)   reads a normlab safetensors checkpoint
    save_checkpoint(model, path)     -> writes float32 tensors + metadata {"config": json}
    param_specs(config)              -> [(name, shape)] in canonical order
    param_table(config)              -> [ParamSpec]: name, shape, role, stack, sub-layer kind, row blocks
    init_params(config)              -> OrderedDict of freshly initialized tensors
    admin_init_value(config, stack)  -> the closed-form Admin omega (log / sqrt / one)
normlab_torch_forward.py     the forward pass and Admin's profile walk
    forward(model, input_ids, labels, **inputs) -> (loss, logits)
    forward_params(config, params, input_ids, labels, token_types, key_mask,
                   decoder_input_ids, decoder_mask) -> (loss, logits)           functional form
    forward_outputs(...same...)      -> {"loss", "logits", "memory" (encdec), "hidden" (list)}
        encdec: input_ids = the source (B, S), key_mask = its padding mask (B, S) (0 = padding),
        decoder_input_ids = the target input (B, T), decoder_mask = its padding mask (B, T) or None
        (Hugging Face's input_ids / attention_mask / decoder_input_ids / decoder_attention_mask).
    admin_profile(config, params, input_ids, ...) -> sets every Admin omega by the profile walk
normlab_torch_train.py       AdamW, the LR schedules and the trainer
    lr_factor(train_cfg, t)          -> f(t) of the LR schedule (t is the 1-based step)
    make_optimizer(model, train_cfg) -> (torch.optim.AdamW, LambdaLR)
    train(model, input_ids, labels, train_cfg, **inputs) -> list of {"step", "loss", "lr", "grad_norm"}
and here:
    patch(name, value)               -> the old value; replaces an oracle function for a test double
"""

# Every public name of the five modules, so that `nt.<name>` reaches all of them.
from normlab_torch_config import *   # noqa: F401,F403
from normlab_torch_hyper import *    # noqa: F401,F403
from normlab_torch_params import *   # noqa: F401,F403
from normlab_torch_forward import *  # noqa: F401,F403
from normlab_torch_train import *    # noqa: F401,F403

import normlab_torch_config
import normlab_torch_forward
import normlab_torch_hyper
import normlab_torch_params
import normlab_torch_train

_MODULES = (normlab_torch_config, normlab_torch_hyper, normlab_torch_params, normlab_torch_forward, normlab_torch_train)


def patch(name, value):
    """Rebind `name` (a function such as stacks, or the METHODS table) here and in every oracle module
    that holds it, so that the oracle's own calls use `value`; returns the previous value (to restore
    it with a second patch). Test doubles (fake_normlab.py's injected bugs, selftest_methods.py) use
    it: a plain `nt.name = value` would rebind only this file's name, which the modules never read."""
    old = globals()[name]
    for namespace in (globals(), *(vars(m) for m in _MODULES)):
        if namespace.get(name) is old:
            namespace[name] = value
    return old
