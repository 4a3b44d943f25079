"""golden_cases: the cases golden.py runs: the model sizes (SMALL, EXTRA, DEEP, ENCDEC, ...), the
training config of the "train" cases, the Case record, and build_cases(), the table of every case
(the default ones and the --extra acceptance ones).
"""

import json

import normlab_torch as nt

SMALL = dict(d_model=32, n_heads=4, n_layers=2, d_ff=48, seq_len=8)
SMALL_BT = (3, 7)
EXTRA = dict(d_model=96, n_heads=6, n_layers=3, seq_len=32)
EXTRA_BT = (2, 17)
# deep but narrow: LayerScale's depth-dependent init (0.1 up to 18 layers, 1e-5 up to 24, 1e-6 beyond)
DEEP = dict(d_model=8, n_heads=2, d_ff=12, seq_len=6)
DEEP_BT = (2, 5)
# encoder-decoder: odd sizes (C = 36 with 3 heads of 12, F = 52), N = 2 encoder and M = 3 decoder
# layers; (B, S, T) with S != T and T = seq_len (the whole position table is used)
ENCDEC = dict(arch="encdec", d_model=36, n_heads=3, n_layers=2, dec_layers=3, d_ff=52, seq_len=9)
ENCDEC_BST = (3, 7, 9)
ENCDEC_EXTRA = dict(arch="encdec", d_model=96, n_heads=6, n_layers=3, dec_layers=2, seq_len=32)
ENCDEC_EXTRA_BST = (2, 17, 13)

TRAIN_CFG = dict(steps=10, lr=3e-3, lr_schedule="warmup", warmup_steps=4, weight_decay=0.1,
                 beta1=0.9, beta2=0.95, adam_eps=1e-8, grad_clip=1.0)


class Case:
    def __init__(self, name, model, bt, kind="grads", sets=None, train=None, extra=False, pad=False,
                 masks=("src", "tgt"), fresh=False):
        self.name, self.model, self.kind = name, model, kind
        self.bt = bt                      # (B, T); encdec: (B, S, T)
        self.pad = pad                    # gpt / encoder: right-padded rows with an attention_mask (and token types)
        self.masks = tuple(masks)         # encdec: which padding masks the token file holds ("src", "tgt");
                                          # a row's target is right-padded either way (labels -100 there)
        self.sets = sets or []            # --set overrides passed to `normlab init`
        self.train = train
        self.fresh = fresh                # train: from the trainer's own init instead of train.init_from
        self.extra = extra

    def intended_model(self):
        """The [model] config after the --set overrides (what the metadata must say)."""
        m = dict(self.model)
        for s in self.sets:
            key, val = s.split("=", 1)
            sec, k = key.split(".", 1)
            assert sec == "model"
            m[k] = json.loads(val)   # the overrides used here are JSON-compatible TOML values
        return m


NEW_METHODS = ("admin", "rezero", "skipinit", "layerscale", "tfixup", "residual", "peri", "reordered", "lns",
               "hybridnorm", "hybridnorm_pre")


def build_cases():
    cases = []
    for arch in ("gpt", "encoder"):
        for p in nt.PLACEMENTS:       # every method, new ones (admin ... tfixup) included
            # (nGPT takes only its own setting: the l2 norm, no learned positions, no biases)
            need = dict(norm="l2", positions="rope", bias="none") if nt.METHODS[p].sphere else {}
            cases.append(Case(f"{arch}_{p}", dict(SMALL, arch=arch, placement=p, **need), SMALL_BT))
    cases += [
        Case("gpt_pre_rmsnorm", dict(SMALL, placement="pre", norm="rmsnorm"), SMALL_BT),
        Case("gpt_post_rmsnorm", dict(SMALL, placement="post", norm="rmsnorm"), SMALL_BT),
        Case("encoder_pre_rmsnorm", dict(SMALL, arch="encoder", placement="pre", norm="rmsnorm"), SMALL_BT),
        Case("encoder_post_rmsnorm", dict(SMALL, arch="encoder", placement="post", norm="rmsnorm"), SMALL_BT),
        Case("gpt_pre_relu", dict(SMALL, placement="pre", activation="relu"), SMALL_BT),
        Case("gpt_pre_noresidual", dict(SMALL, placement="pre", residual=False), SMALL_BT),
        Case("gpt_post_noresidual", dict(SMALL, placement="post", residual=False), SMALL_BT),
        # attention-only (no MLP sub-layers), with and without skips: the pure-attention ablation
        Case("gpt_pre_nomlp", dict(SMALL, placement="pre", mlp=False), SMALL_BT),
        Case("gpt_post_nomlp", dict(SMALL, placement="post", mlp=False), SMALL_BT),
        Case("gpt_pre_nomlp_noresidual", dict(SMALL, placement="pre", mlp=False, residual=False), SMALL_BT),
        Case("encoder_sandwich_nomlp", dict(SMALL, arch="encoder", placement="sandwich", mlp=False), SMALL_BT),
        Case("gpt_mix_nomlp", dict(SMALL, n_layers=3, placement=["post", "pre", "deepnorm"], mlp=False), SMALL_BT),
        # the per-layer list goes through the CLI override (TOML says "pre")
        Case("gpt_mix_pre_post_sandwich", dict(SMALL, n_layers=3, placement="pre"), SMALL_BT,
             sets=['model.placement=["pre","post","sandwich"]']),
        Case("encoder_mix_pre_post_sandwich", dict(SMALL, arch="encoder", n_layers=3,
             placement=["pre", "post", "sandwich"]), SMALL_BT),
        Case("gpt_pre_eps0", dict(SMALL, placement="pre", eps=0.0), SMALL_BT),
        # the pieces of GPT-2 and BERT: exact GELU, token types, embedding norm, MLM head, padding
        Case("encoder_bert_like_pad", dict(SMALL, arch="encoder", placement="post", embed_norm=True, head="mlm",
                                           type_vocab=2, activation="gelu_exact", eps=1e-12), SMALL_BT, pad=True),
        Case("gpt_pre_gelu_exact_pad", dict(SMALL, placement="pre", activation="gelu_exact"), SMALL_BT, pad=True),
        Case("encoder_pre_rmsnorm_mlm_types", dict(SMALL, arch="encoder", placement="pre", norm="rmsnorm",
                                                   embed_norm=True, head="mlm", type_vocab=3), SMALL_BT, pad=True),
        Case("gpt_post_eps0", dict(SMALL, placement="post", eps=0.0), SMALL_BT),
        Case("gpt_pre_init_normal", dict(SMALL, placement="pre", init="normal"), SMALL_BT),
        Case("gpt_pre_init_xavier", dict(SMALL, placement="pre", init="xavier"), SMALL_BT),
        Case("gpt_pre_init_deepnet", dict(SMALL, placement="pre", init="deepnet"), SMALL_BT),
        # an untied output matrix: no residual branch, gain 1 under DeepNet
        Case("gpt_pre_init_deepnet_untied", dict(SMALL, placement="pre", init="deepnet", head="untied"), SMALL_BT),
        # the methods of MODEL.md "Methods" beyond the one-per-method cases above
        Case("gpt_admin_sqrt", dict(SMALL, placement="admin", admin_init="sqrt"), SMALL_BT),
        Case("encoder_admin_one", dict(SMALL, arch="encoder", placement="admin", admin_init="one"), SMALL_BT),
        Case("gpt_admin_rmsnorm", dict(SMALL, placement="admin", norm="rmsnorm"), SMALL_BT),
        Case("gpt_mix_admin_rezero_layerscale", dict(SMALL, n_layers=3, placement=["admin", "rezero", "layerscale"]),
             SMALL_BT),
        Case("gpt_mix_skipinit_tfixup_pre", dict(SMALL, n_layers=3, placement="pre"), SMALL_BT,
             sets=['model.placement=["skipinit","tfixup","pre"]']),
        Case("gpt_rezero_nomlp", dict(SMALL, placement="rezero", mlp=False), SMALL_BT),
        Case("gpt_layerscale_noresidual", dict(SMALL, placement="layerscale", residual=False), SMALL_BT),
        Case("gpt_admin_deepnorm_noresidual", dict(SMALL, n_layers=2, placement=["admin", "deepnorm"],
                                                  residual=False), SMALL_BT),
        Case("encoder_skipinit_pad", dict(SMALL, arch="encoder", placement="skipinit"), SMALL_BT, pad=True),
        Case("gpt_layerscale_pad", dict(SMALL, placement="layerscale", activation="gelu_exact"), SMALL_BT, pad=True),
        Case("gpt_pre_init_tfixup", dict(SMALL, placement="pre", init="tfixup"), SMALL_BT),
        Case("gpt_layerscale_depth19", dict(DEEP, n_layers=19, placement="layerscale"), DEEP_BT),
        # encoder-decoder: every method at least once in each stack, mixed per-layer lists, shared and
        # unshared embeddings, source and target padding, odd sizes
        Case("encdec_pre", dict(ENCDEC, placement="pre"), ENCDEC_BST),
        Case("encdec_post_unshared", dict(ENCDEC, placement="post", shared_embeddings=False, src_vocab=300),
             ENCDEC_BST),
        Case("encdec_post_untied_head", dict(ENCDEC, placement="post", head="untied"), ENCDEC_BST),
        Case("encdec_mix_deepnorm_sandwich_pre_prepost", dict(
            ENCDEC, placement=["deepnorm", "sandwich", "pre", "prepost", "deepnorm"]), ENCDEC_BST),
        Case("encdec_mix_admin_rezero_skipinit_layerscale_none", dict(
            ENCDEC, placement=["admin", "rezero", "skipinit", "layerscale", "none"], shared_embeddings=False),
            ENCDEC_BST),
        Case("encdec_mix_layerscale_skipinit_rezero_admin_post", dict(ENCDEC, placement="pre"), ENCDEC_BST,
             sets=['model.placement=["layerscale","skipinit","rezero","admin","post"]']),
        Case("encdec_mix_none_prepost_sandwich_post_pre", dict(
            ENCDEC, placement=["none", "prepost", "sandwich", "post", "pre"], shared_embeddings=False,
            src_vocab=261), ENCDEC_BST),
        Case("encdec_tfixup_unshared", dict(ENCDEC, placement="tfixup", shared_embeddings=False), ENCDEC_BST),
        Case("encdec_tfixup_shared", dict(ENCDEC, placement="tfixup"), ENCDEC_BST),
        Case("encdec_deepnorm", dict(ENCDEC, placement="deepnorm"), ENCDEC_BST),
        Case("encdec_admin_sqrt_rmsnorm", dict(ENCDEC, placement="admin", admin_init="sqrt", norm="rmsnorm"),
             ENCDEC_BST),
        Case("encdec_rezero", dict(ENCDEC, placement="rezero"), ENCDEC_BST),
        Case("encdec_layerscale_skipinit", dict(ENCDEC, placement=["skipinit", "skipinit", "layerscale",
                                                                  "layerscale", "layerscale"]), ENCDEC_BST),
        Case("encdec_pre_nomasks", dict(ENCDEC, placement="pre"), ENCDEC_BST, masks=()),
        Case("encdec_post_srcmask", dict(ENCDEC, placement="post"), ENCDEC_BST, masks=("src",)),
        Case("encdec_sandwich_tgtmask", dict(ENCDEC, placement="sandwich"), ENCDEC_BST, masks=("tgt",)),
        # dec_layers omitted: M = N (2 + 2 layers)
        Case("encdec_default_dec_layers", dict({k: v for k, v in ENCDEC.items() if k != "dec_layers"},
                                               placement="prepost"), ENCDEC_BST),
        Case("encdec_pre_init_xavier", dict(ENCDEC, placement="pre", init="xavier"), ENCDEC_BST),
        Case("encdec_prepost_init_normal_gelu_exact", dict(ENCDEC, placement="prepost", init="normal",
                                                           activation="gelu_exact"), ENCDEC_BST),
        Case("encdec_pre_init_deepnet_relu", dict(ENCDEC, placement="pre", init="deepnet", activation="relu"),
             ENCDEC_BST),
        Case("encdec_sandwich_N1_M1", dict(ENCDEC, n_layers=1, dec_layers=1, placement="sandwich"), ENCDEC_BST),
        Case("encdec_pre_T1", dict(ENCDEC, placement="pre"), (2, 3, 1)),
        Case("encdec_post_S1", dict(ENCDEC, placement="post"), (2, 1, 4)),
        Case("encdec_layerscale_depths", dict(DEEP, arch="encdec", n_layers=2, dec_layers=19,
                                              placement="layerscale"), (2, 5, 4)),
        Case("train_gpt_pre", dict(SMALL, placement="pre"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_gpt_post", dict(SMALL, placement="post"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_encoder_pre", dict(SMALL, arch="encoder", placement="pre"), SMALL_BT, kind="train",
             train=TRAIN_CFG),
        Case("train_encdec_mix", dict(ENCDEC, placement=["pre", "post", "pre", "deepnorm", "pre"]), ENCDEC_BST,
             kind="train", train=TRAIN_CFG),
        # ResiDual (two streams per stack): every arch, both norms, padding, BERT pieces around it, an encdec
        # whose stacks differ (each stack has its own second stream), attention-only, and training
        Case("gpt_residual_rmsnorm_pad", dict(SMALL, placement="residual", norm="rmsnorm"), SMALL_BT, pad=True),
        Case("encoder_residual_bert_pieces_pad", dict(SMALL, arch="encoder", placement="residual", embed_norm=True,
                                                      head="mlm", type_vocab=2), SMALL_BT, pad=True),
        Case("encdec_residual", dict(ENCDEC, placement="residual"), ENCDEC_BST),
        Case("encdec_residual_pre_unshared_rmsnorm", dict(ENCDEC, placement=["residual"] * 2 + ["pre"] * 3,
             shared_embeddings=False, src_vocab=300, norm="rmsnorm"), ENCDEC_BST),
        Case("encdec_post_residual_tgtmask", dict(ENCDEC, placement=["post"] * 2 + ["residual"] * 3), ENCDEC_BST,
             masks=("tgt",)),
        Case("encdec_residual_nomlp_T1", dict(ENCDEC, placement="residual", mlp=False), (2, 3, 1)),
        # the point-wise norm kinds (DyT, Derf): every site, the final norm and the embedding norm included
        Case("gpt_pre_dyt", dict(SMALL, placement="pre", norm="dyt"), SMALL_BT),
        Case("encoder_post_derf_pad", dict(SMALL, arch="encoder", placement="post", norm="derf", embed_norm=True,
             head="mlm", type_vocab=2), SMALL_BT, pad=True),
        Case("encdec_sandwich_dyt", dict(ENCDEC, placement="sandwich", norm="dyt", norm_alpha=0.8), ENCDEC_BST),
        Case("train_gpt_pre_derf", dict(SMALL, placement="pre", norm="derf"), SMALL_BT, kind="train",
             train=TRAIN_CFG),
        # gated MLPs (fc = [gate; up]): SwiGLU with RMSNorm as Llama, GeGLU in an encoder with padding
        Case("gpt_pre_rmsnorm_swiglu_nobias", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu",
             bias="none"), SMALL_BT),
        Case("encdec_pre_qkvbias", dict(ENCDEC, placement="pre", bias="qkv"), ENCDEC_BST),
        # the Llama-family block: RMSNorm, RoPE, SwiGLU, no biases (and partial rotary, no positions)
        Case("gpt_llama_block", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu", bias="none",
             positions="rope", n_kv_heads=2), SMALL_BT),
        Case("encoder_mqa_pad", dict(SMALL, arch="encoder", placement="pre", n_kv_heads=1), SMALL_BT, pad=True),
        Case("encoder_rope_partial_pad", dict(SMALL, arch="encoder", placement="post", positions="rope",
             rope_fraction=0.5, rope_base=500.0), SMALL_BT, pad=True),
        Case("encdec_rope_sandwich", dict(ENCDEC, placement="sandwich", positions="rope"), ENCDEC_BST),
        Case("gpt_nopositions", dict(SMALL, placement="pre", positions="none"), SMALL_BT),
        Case("train_gpt_llama_block", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu", bias="none",
             positions="rope", n_kv_heads=2), SMALL_BT, kind="train", train=TRAIN_CFG),
        # an output matrix of its own (lm_head), as most Llama-family models
        Case("gpt_llama_untied_head", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu", bias="none",
             positions="rope", n_kv_heads=1, head="untied"), SMALL_BT),
        Case("train_gpt_untied_head", dict(SMALL, placement="pre", head="untied"), SMALL_BT, kind="train",
             train=TRAIN_CFG),
        Case("encoder_peri_geglu_pad", dict(SMALL, arch="encoder", placement="peri", activation="geglu"), SMALL_BT,
             pad=True),
        Case("encdec_lns_swiglu", dict(ENCDEC, placement="lns", activation="swiglu"), ENCDEC_BST),
        Case("train_gpt_reordered_swiglu", dict(SMALL, placement="reordered", norm="rmsnorm", activation="swiglu"),
             SMALL_BT, kind="train", train=TRAIN_CFG),
        # QK-norm: OLMo 2 (its order, q and k normalized over the whole projection, GQA), per head with the
        # values in an encoder with padding; HybridNorm (QKV-norm per head, N(h) + FFN(N(h))) trained, HybridNorm*
        Case("gpt_olmo2_qknorm_whole", dict(SMALL, placement="reordered", norm="rmsnorm", activation="swiglu",
             bias="none", positions="rope", n_kv_heads=2, qk_norm="whole"), SMALL_BT),
        Case("encoder_qkvnorm_heads_pad", dict(SMALL, arch="encoder", placement="pre", qk_norm="heads", v_norm=True),
             SMALL_BT, pad=True),
        Case("train_gpt_hybridnorm", dict(SMALL, placement="hybridnorm", norm="rmsnorm", positions="rope"), SMALL_BT,
             kind="train", train=TRAIN_CFG),
        Case("gpt_hybridnorm_star_dyt", dict(SMALL, placement="hybridnorm*", norm="dyt", qk_norm="whole"), SMALL_BT),
        # gated attention (Qiu et al. 2025, Qwen3-Next): one sigmoid gate per head on the Llama block with
        # GQA and QK-norm; one per channel in an encoder with q, k, v biases (the gate's too) and padding; trained
        Case("gpt_gated_attention_headwise", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu",
             bias="none", positions="rope", n_kv_heads=2, qk_norm="heads", attn_gate="headwise"), SMALL_BT),
        Case("encoder_gated_attention_elementwise_pad", dict(SMALL, arch="encoder", placement="post", bias="qkv",
             attn_gate="elementwise"), SMALL_BT, pad=True),
        Case("train_gpt_gated_attention", dict(SMALL, placement="pre", norm="rmsnorm", positions="rope",
             attn_gate="elementwise"), SMALL_BT, kind="train", train=TRAIN_CFG),
        # learned sink logits (gpt-oss): the Llama block with GQA; an encoder with padding and Gemma 2's score
        # cap (on the scores, not the sink); trained, so the sinks move
        Case("gpt_attn_sink", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu", bias="none",
             positions="rope", n_kv_heads=2, attn_sink=True), SMALL_BT),
        Case("encoder_attn_sink_softcap_pad", dict(SMALL, arch="encoder", placement="post", attn_sink=True,
             attn_softcap=2.0), SMALL_BT, pad=True),
        Case("train_gpt_attn_sink", dict(SMALL, placement="pre", norm="rmsnorm", positions="rope", attn_sink=True),
             SMALL_BT, kind="train", train=TRAIN_CFG),
        # value residual learning (ResFormer): the Llama block with GQA over three layers; a padded Post-LN encoder
        # with DyT and per-head QKV-norm (the mix after the v-norm); both stacks of an encoder-decoder, each with its
        # own first layer; trained
        Case("gpt_value_residual", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", activation="swiglu",
             bias="none", positions="rope", n_kv_heads=2, value_residual=0.5), SMALL_BT),
        Case("encoder_value_residual_qkvnorm_pad", dict(SMALL, arch="encoder", placement="post", norm="dyt",
             qk_norm="heads", v_norm=True, value_residual=0.3), SMALL_BT, pad=True),
        Case("encdec_value_residual", dict(ENCDEC, placement="pre", value_residual=0.5), ENCDEC_BST),
        Case("train_gpt_value_residual", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", positions="rope",
             value_residual=0.5), SMALL_BT, kind="train", train=TRAIN_CFG),
        # CompleteP: a 4-layer model on a base depth of 1 (branches x 1/4, Adam's eps x 1/4), Pre-LN and Post-LN's
        # order, the init without a depth term; trained (the eps matters: eps 1e-3 against tiny early moments),
        # with muP (eps / (m_L m)) on an untied head
        Case("gpt_completep", dict(SMALL, n_layers=4, placement="pre", completep_base_depth=1), SMALL_BT),
        Case("encoder_completep_post_pad", dict(SMALL, arch="encoder", n_layers=3, placement="post",
             completep_base_depth=2), SMALL_BT, pad=True),
        Case("train_gpt_completep", dict(SMALL, n_layers=4, placement="pre", norm="rmsnorm", positions="rope",
             completep_base_depth=1), SMALL_BT, kind="train", train=dict(TRAIN_CFG, adam_eps=1e-3)),
        Case("train_gpt_completep_mup", dict(SMALL, n_layers=4, placement="pre", head="untied", mup_base_width=16,
             completep_base_depth=2), SMALL_BT, kind="train", train=dict(TRAIN_CFG, adam_eps=1e-3)),
        # hyper-connections: dynamic HC on the Llama block with GQA (4 streams), static HC on a padded Peri-LN
        # encoder, mHC with 2 and 3 streams, mHC-lite with 3 and 4; trained, so the input-dependent maps (0 at
        # init) move off 0
        Case("gpt_hc_llama", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", activation="swiglu", bias="none",
             positions="rope", n_kv_heads=2, hyper="hc", hyper_streams=4), SMALL_BT),
        Case("encoder_hc_static_peri_pad", dict(SMALL, arch="encoder", placement="peri", hyper="hc_static",
             hyper_streams=3), SMALL_BT, pad=True),
        Case("gpt_mhc", dict(SMALL, n_layers=3, placement="pre", hyper="mhc", hyper_streams=3), SMALL_BT),
        Case("gpt_mhc_lite_llama", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", activation="swiglu",
             bias="none", positions="rope", hyper="mhc_lite", hyper_streams=4), SMALL_BT),
        Case("train_gpt_hc", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", positions="rope", hyper="hc",
             hyper_streams=4), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_gpt_mhc", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", positions="rope", hyper="mhc",
             hyper_streams=2, sinkhorn_iters=5), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_gpt_mhc_lite", dict(SMALL, n_layers=2, placement="pre", hyper="mhc_lite", hyper_streams=3), SMALL_BT,
             kind="train", train=TRAIN_CFG),
        # Attention Residuals: blocks of one layer (Kimi K3's block size 1) on the Llama block, Full AttnRes on a
        # padded Peri-LN encoder, blocks of 3 sub-layers trained (the pseudo-queries, 0 at init, move off 0)
        Case("gpt_attn_res_llama", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", activation="swiglu",
             bias="none", positions="rope", n_kv_heads=2, hyper="attn_res", attn_res_block=2, hyper_streams=4),
             SMALL_BT),
        Case("encoder_attn_res_full_peri_pad", dict(SMALL, arch="encoder", placement="peri", hyper="attn_res",
             hyper_streams=2 * SMALL["n_layers"] + 1), SMALL_BT, pad=True),
        Case("train_gpt_attn_res", dict(SMALL, n_layers=3, placement="pre", norm="rmsnorm", positions="rope",
             hyper="attn_res", attn_res_block=3, hyper_streams=3), SMALL_BT, kind="train", train=TRAIN_CFG),
        # single-scale RMSNorm (Outlier-Safe Pre-Training): the Llama block with per-head QK-norm of the same kind
        # (one scalar per site), and a padded Post-LN encoder; trained
        Case("gpt_ssnorm_llama_qk_norm", dict(SMALL, placement="pre", norm="ssnorm", activation="swiglu", bias="none",
             positions="rope", n_kv_heads=2, qk_norm="heads"), SMALL_BT),
        Case("encoder_post_ssnorm_pad", dict(SMALL, arch="encoder", placement="post", norm="ssnorm"), SMALL_BT, pad=True),
        Case("train_gpt_ssnorm", dict(SMALL, placement="pre", norm="ssnorm", positions="rope"), SMALL_BT, kind="train",
             train=TRAIN_CFG),
        # QK-Clip (Kimi K2, in Megatron-LM's grouped form) on the Llama block with GQA and q, k, v biases, a
        # threshold the scores pass from step 3 on, so that steps with and without clipping follow, alpha 0.3
        Case("train_gpt_qk_clip", dict(SMALL, placement="pre", norm="rmsnorm", positions="rope", bias="qkv",
             n_kv_heads=2), SMALL_BT, kind="train", train=dict(TRAIN_CFG, qk_clip=0.04, qk_clip_alpha=0.3)),
        # Gemma's block: GeGLU, the token embedding times sqrt(d), multi-query, RMSNorm
        Case("gpt_gemma_block", dict(SMALL, placement="pre", norm="rmsnorm", activation="geglu", bias="none",
             positions="rope", n_kv_heads=1, embed_scale=32 ** 0.5), SMALL_BT),
        # DyT's LLaMA recipe: no beta, alpha 0.8 at the attention's input norm and 0.2 elsewhere, a learned
        # embedding scale starting at sqrt(d); trained, so the scale's and the alphas' gradients move them
        Case("gpt_llama_dyt_recipe", dict(SMALL, placement="pre", norm="dyt", norm_bias=False, norm_alpha=0.2,
             norm_alpha_attn=0.8, activation="swiglu", bias="none", positions="rope", n_kv_heads=2,
             embed_scale=32 ** 0.5, embed_scale_learned=True), SMALL_BT),
        Case("train_gpt_llama_dyt_recipe", dict(SMALL, placement="pre", norm="dyt", norm_bias=False, norm_alpha=0.2,
             norm_alpha_attn=0.8, positions="rope", embed_scale_learned=True), SMALL_BT, kind="train", train=TRAIN_CFG),
        # muP at twice its base width (m = 2): the readout's 1/m, the scores' 1/HS, MuAdamW's groups (the
        # hidden matrices at lr / 2 with decay x 2); tied and untied, trained
        Case("gpt_mup", dict(SMALL, placement="pre", mup_base_width=16), SMALL_BT),
        Case("train_gpt_mup_untied", dict(SMALL, placement="pre", norm="rmsnorm", activation="swiglu", bias="none",
             positions="rope", head="untied", mup_base_width=16), SMALL_BT, kind="train", train=TRAIN_CFG),
        # weightless QK-norm (no gain, no bias): per head with LayerNorm, over the whole projection with RMSNorm
        Case("gpt_qknorm_weightless_heads", dict(SMALL, placement="pre", qk_norm="heads", qk_norm_affine=False,
             positions="rope", n_kv_heads=2), SMALL_BT),
        Case("encoder_qkvnorm_weightless_whole_pad", dict(SMALL, arch="encoder", placement="pre", norm="rmsnorm",
             qk_norm="whole", v_norm=True, qk_norm_affine=False), SMALL_BT, pad=True),
        Case("gpt_post_layernorm_nobias", dict(SMALL, placement="post", norm_bias=False), SMALL_BT),
        Case("gpt_post_l2", dict(SMALL, placement="post", norm="l2", eps=0.0), SMALL_BT),
        # nGPT: the update on the sphere, unit q and k heads times s_qk, s_uv, s_z, scores by sqrt(HS);
        # trained (AdamW without decay, the matrices renormalized after every step), and as an encoder
        Case("gpt_ngpt_swiglu_untied", dict(SMALL, placement="ngpt", norm="l2", eps=0.0, positions="rope", bias="none",
             activation="swiglu", head="untied"), SMALL_BT),
        Case("train_gpt_ngpt", dict(SMALL, placement="ngpt", norm="l2", eps=0.0, positions="rope", bias="none",
             activation="swiglu", head="untied"), SMALL_BT, kind="train", train=dict(TRAIN_CFG, weight_decay=0.0)),
        Case("encoder_ngpt_pad", dict(SMALL, arch="encoder", placement="ngpt", norm="l2", positions="none",
             bias="none"), SMALL_BT, pad=True),
        Case("encoder_peri_l2_qknorm_pad", dict(SMALL, arch="encoder", placement="peri", norm="l2", qk_norm="heads"),
             SMALL_BT, pad=True),
        # Gemma 2's block: the sandwich (pre and post norms of each branch), GeGLU, sqrt(d) embedding scale,
        # grouped-query attention with its own score scale, attention and final-logit soft-capping (caps
        # small enough that tanh bends: the scores and logits reach them); trained, and as an encoder.
        # The forward cases' logit cap is 2 (pre-cap logits reach ~11 here, deep in tanh's bend): the
        # logits are compared relative to their largest value, which the cap sets, while float32's
        # error is that of the pre-cap logits (~5e-6 absolute in torch on an AVX2 Zen 3); at a cap of
        # 0.7 that was 6.6e-6 relative, less than the 5x headroom below RTOL_VALUE selftest.py demands.
        Case("gpt_gemma2_block", dict(SMALL, placement="sandwich", norm="rmsnorm", activation="geglu", bias="none",
             positions="rope", n_kv_heads=2, embed_scale=32 ** 0.5, attn_scale=0.3, attn_softcap=0.5,
             logit_softcap=2.0), SMALL_BT),
        Case("train_gpt_gemma2_block", dict(SMALL, placement="sandwich", norm="rmsnorm", activation="geglu",
             positions="rope", attn_softcap=0.5, logit_softcap=0.7), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("encoder_softcap_pad", dict(SMALL, arch="encoder", placement="pre", attn_softcap=0.4, logit_softcap=2.0),
             SMALL_BT, pad=True),
        Case("train_gpt_residual", dict(SMALL, placement="residual"), SMALL_BT, kind="train", train=TRAIN_CFG),
        Case("train_encdec_residual", dict(ENCDEC, placement="residual"), ENCDEC_BST, kind="train", train=TRAIN_CFG),
        # Admin's profile: both chains (the decoder's after a pre layer), from the trainer's own init
        Case("train_encdec_admin_profile", dict(ENCDEC, placement=["admin", "admin", "admin", "pre", "admin"],
             admin_init="profile"), ENCDEC_BST, kind="train", train=TRAIN_CFG, fresh=True),
    ]
    # --extra: sizes and configurations the default cases do not use (a separate acceptance check)
    ex = []
    for arch in ("gpt", "encoder"):
        for p in ("sandwich", "deepnorm", "prepost", "post"):
            ex.append(Case(f"x_{arch}_{p}", dict(EXTRA, arch=arch, placement=p), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_pre_rmsnorm", dict(EXTRA, arch=arch, placement="pre", norm="rmsnorm"),
                       EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_sandwich_rmsnorm", dict(EXTRA, arch=arch, placement="sandwich",
                       norm="rmsnorm"), EXTRA_BT, extra=True))
        for kind in ("dyt", "derf"):
            ex.append(Case(f"x_{arch}_mix_post_pre_sandwich_{kind}", dict(EXTRA, arch=arch, norm=kind, norm_alpha=0.3,
                           placement=["post", "pre", "sandwich"]), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_mix_deepnorm_pre_sandwich", dict(EXTRA, arch=arch,
                       placement=["deepnorm", "pre", "sandwich"]), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_mix_sandwich_none_prepost", dict(EXTRA, arch=arch,
                       placement=["sandwich", "none", "prepost"]), EXTRA_BT, extra=True))
        ex.append(Case(f"x_{arch}_bert_pieces_pad", dict(EXTRA, arch=arch, placement=["post", "pre", "post"],
                       embed_norm=True, head="mlm", type_vocab=2, activation="gelu_exact"), EXTRA_BT, extra=True,
                       pad=True))
        ex.append(Case(f"x_{arch}_mix_post_deepnorm_pre_relu", dict(EXTRA, arch=arch, activation="relu",
                       placement=["post", "deepnorm", "pre"]), EXTRA_BT, extra=True))
        for p in NEW_METHODS:
            ex.append(Case(f"x_{arch}_{p}", dict(EXTRA, arch=arch, placement=p), EXTRA_BT, extra=True))
    for kvh in (1, 2, 6):   # EXTRA has 6 heads of 16
        ex.append(Case(f"x_gpt_llama_kv{kvh}", dict(EXTRA, placement="pre", norm="rmsnorm", activation="swiglu",
                       bias="none", positions="rope", rope_base=1e5, n_kv_heads=kvh, d_ff=100), EXTRA_BT, extra=True))
    ex.append(Case("x_encoder_gqa_geglu_qkvbias_pad", dict(EXTRA, arch="encoder", placement="peri", activation="geglu",
                   bias="qkv", positions="rope", rope_fraction=0.25, n_kv_heads=3), EXTRA_BT, extra=True, pad=True))
    ex.append(Case("x_gpt_mix_admin_layerscale_rezero_pad", dict(EXTRA, placement=["admin", "layerscale", "rezero"]),
                   EXTRA_BT, extra=True, pad=True))
    ex.append(Case("x_gpt_layerscale_depth25", dict(DEEP, n_layers=25, placement="layerscale"), DEEP_BT,
                   extra=True))
    for p in ("post", "pre", "deepnorm", "admin", "tfixup", "residual", "reordered", "lns"):
        ex.append(Case(f"x_encdec_{p}", dict(ENCDEC_EXTRA, placement=p), ENCDEC_EXTRA_BST, extra=True))
    ex += [
        Case("x_encdec_mix_all_unshared", dict(ENCDEC_EXTRA, placement=["sandwich", "rezero", "layerscale",
             "skipinit", "prepost"], shared_embeddings=False, src_vocab=259, norm="rmsnorm"),
             ENCDEC_EXTRA_BST, extra=True),
        Case("x_encdec_pre_nomlp", dict(ENCDEC_EXTRA, placement="pre", mlp=False), ENCDEC_EXTRA_BST, extra=True),
        Case("x_encdec_post_noresidual", dict(ENCDEC_EXTRA, placement="post", residual=False), ENCDEC_EXTRA_BST,
             extra=True),
    ]
    ex.append(Case("x_train_gpt_sandwich", dict(EXTRA, placement="sandwich"), EXTRA_BT, kind="train",
                   train=TRAIN_CFG, extra=True))
    ex.append(Case("x_train_encoder_deepnorm", dict(EXTRA, arch="encoder", placement="deepnorm"), EXTRA_BT,
                   kind="train", train=TRAIN_CFG, extra=True))
    # New methods in training. They assume that `normlab train` with train.init_from keeps the
    # checkpoint's Admin omegas (the profile initialization is for a *fresh* model, MODEL.md).
    ex.append(Case("x_train_gpt_rezero_skipinit_layerscale", dict(SMALL, n_layers=3,
                   placement=["rezero", "skipinit", "layerscale"]), SMALL_BT, kind="train", train=TRAIN_CFG,
                   extra=True))
    ex.append(Case("x_train_gpt_admin", dict(SMALL, placement="admin"), SMALL_BT, kind="train", train=TRAIN_CFG,
                   extra=True))
    # admin_init = profile, a fresh model: the trainer profiles the omegas on the (fixed) batch before step 1
    ex.append(Case("x_train_gpt_admin_profile", dict(SMALL, n_layers=3, placement="admin", admin_init="profile"),
                   SMALL_BT, kind="train", train=TRAIN_CFG, extra=True, fresh=True))
    # ... and from a checkpoint (train.init_from) it keeps the checkpoint's omegas (the log values)
    ex.append(Case("x_train_gpt_admin_profile_init_from", dict(SMALL, placement="admin", admin_init="profile"),
                   SMALL_BT, kind="train", train=TRAIN_CFG, extra=True))
    ex.append(Case("x_train_encdec_methods", dict(ENCDEC, placement=["admin", "layerscale", "rezero", "skipinit",
                   "tfixup"], shared_embeddings=False), ENCDEC_BST, kind="train", train=TRAIN_CFG, extra=True))
    return cases + ex
