/* GPT-2, Llama (Qwen2 too) and Mixtral- or Qwen2-MoE-style mixture-of-experts Llama weights in from
 * Hugging Face safetensors (one file or shards) and GPT-2's from llm.c
 * checkpoints, and out as safetensors (import.h). */
#include "import.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/half.h"
#include "safetensors.h"

/* How a family's engine names (model.h's tensor table) are spelled in
 * Hugging Face checkpoints. Names are compared without the optional
 * prefix (GPT-2's "transformer.", Llama's "model."); block l's tensor is
 * named block, l, ".", then its suffix ("h.3.ln_1.weight",
 * "layers.3.input_layernorm.weight"). */
typedef struct {
  const char *engine, *hf;
  int transpose; /* Conv1D's [in, out], the transpose of the engine's (out, in) */
} name_map_t;

typedef struct {
  const char *title;         /* in messages: "GPT-2", "Llama" */
  const char *prefix;        /* stripped when present */
  const char *export_prefix; /* written before every name but the head's */
  const char *block;         /* what precedes a block's index */
  const name_map_t *top, *blocks;
  int n_top, n_blocks;
  const char *const *buffers; /* block tensors that hold no weights, skipped */
  int n_buffers;
} family_t;

static const name_map_t gpt2_top[] = {{"wte", "wte.weight", 0},
                                      {"wpe", "wpe.weight", 0},
                                      {"lnf.w", "ln_f.weight", 0},
                                      {"lnf.b", "ln_f.bias", 0}};
static const name_map_t gpt2_blocks[] = {
    {"ln1.w", "ln_1.weight", 0},          {"ln1.b", "ln_1.bias", 0},
    {"qkv.w", "attn.c_attn.weight", 1},   {"qkv.b", "attn.c_attn.bias", 0},
    {"proj.w", "attn.c_proj.weight", 1},  {"proj.b", "attn.c_proj.bias", 0},
    {"ln2.w", "ln_2.weight", 0},          {"ln2.b", "ln_2.bias", 0},
    {"fc.w", "mlp.c_fc.weight", 1},       {"fc.b", "mlp.c_fc.bias", 0},
    {"fcproj.w", "mlp.c_proj.weight", 1}, {"fcproj.b", "mlp.c_proj.bias", 0},
};
/* The causal mask GPT-2's attention keeps as buffers. */
static const char *const gpt2_buffers[] = {"attn.bias", "attn.masked_bias"};

static const name_map_t llama_top[] = {
    {"wte", "embed_tokens.weight", 0}, {"lnf.w", "norm.weight", 0}, {"head.w", "lm_head.weight", 0}};
static const name_map_t llama_blocks[] = {
    {"ln1.w", "input_layernorm.weight", 0},
    {"q.w", "self_attn.q_proj.weight", 0},
    {"k.w", "self_attn.k_proj.weight", 0},
    {"v.w", "self_attn.v_proj.weight", 0},
    {"proj.w", "self_attn.o_proj.weight", 0},
    {"ln2.w", "post_attention_layernorm.weight", 0},
    {"gate.w", "mlp.gate_proj.weight", 0},
    {"up.w", "mlp.up_proj.weight", 0},
    {"down.w", "mlp.down_proj.weight", 0},
    /* Qwen2's q/k/v biases (a model with qkv_bias has these tensors). */
    {"q.b", "self_attn.q_proj.bias", 0},
    {"k.b", "self_attn.k_proj.bias", 0},
    {"v.b", "self_attn.v_proj.bias", 0},
};
/* Older transformers versions save RoPE's inverse frequencies per block. */
static const char *const llama_buffers[] = {"self_attn.rotary_emb.inv_freq"};

#define COUNT(a) ((int)(sizeof(a) / sizeof(a)[0]))

static const family_t gpt2_family = {.title = "GPT-2",
                                     .prefix = "transformer.",
                                     .export_prefix = "",
                                     .block = "h.",
                                     .top = gpt2_top,
                                     .blocks = gpt2_blocks,
                                     .n_top = COUNT(gpt2_top),
                                     .n_blocks = COUNT(gpt2_blocks),
                                     .buffers = gpt2_buffers,
                                     .n_buffers = COUNT(gpt2_buffers)};
static const family_t llama_family = {.title = "Llama",
                                      .prefix = "model.",
                                      .export_prefix = "model.",
                                      .block = "layers.",
                                      .top = llama_top,
                                      .blocks = llama_blocks,
                                      .n_top = COUNT(llama_top),
                                      .n_blocks = COUNT(llama_blocks),
                                      .buffers = llama_buffers,
                                      .n_buffers = COUNT(llama_buffers)};

static const family_t *family_of(const aa_gpt_t *m) {
  return aa_arch_is_llama(&m->arch) ? &llama_family : &gpt2_family;
}

/* An MoE block's stacked tensors (model.c's table) hold one Hugging Face
 * tensor per expert, or two: experts.w13 (E 2Fe, C) is per expert the rows
 * of Mixtral's w1 (gate) then w3 (up), experts.w2 (E C, Fe) per expert w2
 * (down); the shared experts the same under names of autoaccel's own
 * (Mixtral has none). The router is Mixtral's gate.
 *
 * A model with moe.shared_expert_gate is Qwen2-MoE's (Qwen2MoeSparseMoeBlock)
 * and has its names: mlp.gate (the router), mlp.experts.<e>.gate_proj,
 * up_proj, down_proj, and one shared expert of width S Fe, whose gate_proj
 * and up_proj (S Fe, C) rows and down_proj (C, S Fe) columns are the S
 * shared experts of width Fe side by side (SwiGLU is separable over its
 * width), and its sigmoid gate mlp.shared_expert_gate (1, C). */
#define MOE_PREFIX "block_sparse_moe."
typedef struct {
  const char *engine, *hf; /* hf: a format with the expert's index and the part's name */
  /* Hugging Face tensors per expert in the engine tensor (0: the engine
   * tensor is one); QWEN_SHARED_W13 / _W2: Qwen's one shared expert. */
  int parts;
  const char *part[2]; /* the names of an expert's parts */
} moe_map_t;
#define QWEN_SHARED_W13 (-2) /* gate_proj and up_proj, each (S Fe, C) */
#define QWEN_SHARED_W2 (-1)  /* down_proj (C, S Fe) */

static const moe_map_t mixtral_blocks[] = {
    {"router.w", MOE_PREFIX "gate.weight", 0, {NULL, NULL}},
    {"experts.w13", MOE_PREFIX "experts.%d.%s.weight", 2, {"w1", "w3"}},
    {"experts.w2", MOE_PREFIX "experts.%d.%s.weight", 1, {"w2", NULL}},
    {"shared.w13", MOE_PREFIX "shared_experts.%d.%s.weight", 2, {"w1", "w3"}},
    {"shared.w2", MOE_PREFIX "shared_experts.%d.%s.weight", 1, {"w2", NULL}},
};
static const moe_map_t qwen_blocks[] = {
    {"router.w", "mlp.gate.weight", 0, {NULL, NULL}},
    {"experts.w13", "mlp.experts.%d.%s.weight", 2, {"gate_proj", "up_proj"}},
    {"experts.w2", "mlp.experts.%d.%s.weight", 1, {"down_proj", NULL}},
    {"shared.w13", "mlp.shared_expert.%s.weight", QWEN_SHARED_W13, {"gate_proj", "up_proj"}},
    {"shared.w2", "mlp.shared_expert.%s.weight", QWEN_SHARED_W2, {"down_proj", NULL}},
    {"shared.gate", "mlp.shared_expert_gate.weight", 0, {NULL, NULL}},
};

/* One Hugging Face tensor of m: all of engine tensor `tensor`, or one
 * expert's slice of it (numel elements from element `offset`), under its
 * Hugging Face name (without the prefix), with the shape it has there. */
typedef struct {
  char hf[96];
  int tensor;
  size_t offset, numel;
  int transpose;
  /* Qwen's shared expert (numel S Fe C) is not one slice of the engine
   * tensor: 1 its gate_proj, 2 its up_proj (each S row blocks of Fe C,
   * to the first or second half of each shared expert's w13), 3 its
   * down_proj (row c holds column block c of every expert's w2); 0 none. */
  int scatter;
  int ndim;
  int64_t shape[2];
} hf_tensor_t;

/* Whether a's MoE blocks carry Qwen2-MoE's names (moe_map_t). */
static int qwen_moe(const aa_arch_t *a) { return a->moe.experts && a->moe.shared_expert_gate; }

static const moe_map_t *moe_map(const aa_tensor_desc_t *t, const aa_arch_t *a) {
  const char *dot = t->layer >= 0 ? strchr(t->name, '.') : NULL;
  const moe_map_t *map = qwen_moe(a) ? qwen_blocks : mixtral_blocks;
  const int n = qwen_moe(a) ? COUNT(qwen_blocks) : COUNT(mixtral_blocks);
  for (int k = 0; dot && k < n; k++)
    if (!strcmp(dot + 1, map[k].engine)) return &map[k];
  return NULL;
}

/* The Hugging Face tensors engine tensor t is stored as. */
static int hf_pieces(const aa_tensor_desc_t *t, const aa_arch_t *a) {
  const moe_map_t *x = moe_map(t, a);
  if (!x || !x->parts) return 1;
  if (x->parts < 0) return -x->parts;
  return (strstr(x->engine, "shared") ? a->moe.shared_experts : a->moe.experts) * x->parts;
}

/* Every Hugging Face tensor of m in the engine's order, into h (n entries,
 * the sum of hf_pieces); AA_EINVAL if the table holds a name the family's
 * map lacks (a table that changed without this file). */
static int hf_names(const aa_gpt_t *m, const family_t *fam, hf_tensor_t *h, int n) {
  const int C = m->arch.d_model, Fe = m->arch.moe.d_ff_expert, S = m->arch.moe.shared_experts;
  int at = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *t = &m->tensors[i];
    const name_map_t *e = NULL;
    const moe_map_t *x = moe_map(t, &m->arch);
    if (x && x->parts < 0) {
      /* Qwen's shared expert: gate_proj and up_proj (S Fe, C), or
       * down_proj (C, S Fe), each spread over the S engine experts. */
      for (int p = 0, np = hf_pieces(t, &m->arch); p < np && at < n; p++, at++) {
        hf_tensor_t *o = &h[at];
        int len = snprintf(o->hf, sizeof o->hf, "%s%d.", fam->block, t->layer);
        snprintf(o->hf + len, sizeof o->hf - (size_t)len, x->hf, x->part[p]);
        o->tensor = i;
        o->transpose = 0;
        o->scatter = x->parts == QWEN_SHARED_W13 ? 1 + p : 3;
        o->offset = 0;
        o->numel = (size_t)S * Fe * C;
        o->ndim = 2;
        o->shape[0] = o->scatter == 3 ? C : S * Fe;
        o->shape[1] = o->scatter == 3 ? S * Fe : C;
      }
      continue;
    }
    if (x && x->parts) {
      /* Expert s's w1 and w3 (Fe, C) rows, or its w2 (C, Fe). */
      for (int p = 0, np = hf_pieces(t, &m->arch); p < np && at < n; p++, at++) {
        const int s = p / x->parts;
        hf_tensor_t *o = &h[at];
        int len = snprintf(o->hf, sizeof o->hf, "%s%d.", fam->block, t->layer);
        snprintf(o->hf + len, sizeof o->hf - (size_t)len, x->hf, s, x->part[p % x->parts]);
        o->tensor = i;
        o->transpose = 0;
        o->scatter = 0;
        o->numel = (size_t)Fe * (size_t)C;
        o->offset = (size_t)p * o->numel;
        o->ndim = 2;
        o->shape[0] = x->parts == 2 ? Fe : C;
        o->shape[1] = x->parts == 2 ? C : Fe;
      }
      continue;
    }
    if (at == n) break;
    hf_tensor_t *o = &h[at++];
    if (x) {
      snprintf(o->hf, sizeof o->hf, "%s%d.%s", fam->block, t->layer, x->hf);
    } else if (t->layer < 0) {
      for (int k = 0; k < fam->n_top && !e; k++)
        if (!strcmp(t->name, fam->top[k].engine)) e = &fam->top[k];
      if (e) snprintf(o->hf, sizeof o->hf, "%s", e->hf);
    } else {
      const char *dot = strchr(t->name, '.');
      for (int k = 0; dot && k < fam->n_blocks && !e; k++)
        if (!strcmp(dot + 1, fam->blocks[k].engine)) e = &fam->blocks[k];
      if (e) snprintf(o->hf, sizeof o->hf, "%s%d.%s", fam->block, t->layer, e->hf);
    }
    if (!e && !x)
      return aa_error(AA_EINVAL, "tensor '%s' of the %s model has no Hugging Face name", t->name, fam->title);
    o->tensor = i;
    o->offset = 0;
    o->numel = t->numel;
    o->transpose = e ? e->transpose : 0;
    o->scatter = 0;
    o->ndim = t->ndim;
    o->shape[0] = o->transpose ? t->shape[1] : t->shape[0];
    o->shape[1] = o->transpose ? t->shape[0] : t->shape[1];
  }
  return at == n ? 0
                 : aa_error(AA_EINVAL, "the %s model's tensors do not add up to their Hugging Face names",
                            fam->title);
}

/* How many Hugging Face tensors m has. */
static int hf_count(const aa_gpt_t *m) {
  int n = 0;
  for (int i = 0; i < m->n_tensors; i++)
    n += hf_pieces(&m->tensors[i], &m->arch);
  return n;
}

/* The block index of name when it is "<block><l>.<suffix>" with a
 * canonical decimal l (no leading zero), or -1; *suffix points past the
 * dot. */
static long block_of(const family_t *fam, const char *name, const char **suffix) {
  size_t bl = strlen(fam->block);
  if (strncmp(name, fam->block, bl) || name[bl] < '0' || name[bl] > '9') return -1;
  const char *p = name + bl;
  long l = 0;
  while (*p >= '0' && *p <= '9' && l < 100000)
    l = l * 10 + (*p++ - '0');
  if (*p != '.' || (name[bl] == '0' && p != name + bl + 1)) return -1; /* "h.01." is not a block's name */
  *suffix = p + 1;
  return l;
}

/* m's Hugging Face names sorted, for lookups by name: a model of many
 * experts has tens of thousands. */
static int by_hf_name(const void *a, const void *b) {
  return strcmp((*(const hf_tensor_t *const *)a)->hf, (*(const hf_tensor_t *const *)b)->hf);
}

/* The index into hf (sorted: its n entries ordered by name) of a Hugging
 * Face name without the prefix, or -1 if it is none of this model's. A
 * block tensor beyond the model's blocks sets *beyond. */
static int hf_index(const aa_gpt_t *m, const family_t *fam, const hf_tensor_t *hf,
                    const hf_tensor_t *const *sorted, int n, const char *name, int *beyond) {
  *beyond = 0;
  hf_tensor_t key;
  const size_t len = strlen(name);
  if (len < sizeof key.hf) {
    memcpy(key.hf, name, len + 1);
    const hf_tensor_t *k = &key, *const *hit = bsearch(&k, sorted, (size_t)n, sizeof *sorted, by_hf_name);
    if (hit) return (int)(*hit - hf);
  }
  const char *suffix;
  long l = block_of(fam, name, &suffix);
  if (l < 0) return -1;
  for (int j = 0; j < fam->n_blocks && l >= m->arch.n_layer; j++)
    if (!strcmp(suffix, fam->blocks[j].hf)) *beyond = 1;
  if (aa_arch_is_llama(&m->arch) && l >= m->arch.n_layer &&
      (!strncmp(suffix, MOE_PREFIX, strlen(MOE_PREFIX)) || !strncmp(suffix, "mlp.", 4)))
    *beyond = 1;
  return -1;
}

/* Qwen-MoE's names of a sparse block's tensors (Qwen2MoeSparseMoeBlock:
 * "mlp.gate", "mlp.experts.<e>.gate_proj", up_proj, down_proj) as
 * Mixtral's, into buf; any other name as it is (a model with the gated
 * shared expert reads Qwen's names as they are). */
static const char *mixtral_name(const family_t *fam, const char *name, char *buf, size_t cap) {
  static const char *const from[] = {"mlp.gate.weight", "gate_proj.weight", "up_proj.weight",
                                     "down_proj.weight"};
  static const char *const to[] = {MOE_PREFIX "gate.weight", "w1.weight", "w3.weight", "w2.weight"};
  const char *suffix;
  if (fam != &llama_family || block_of(fam, name, &suffix) < 0) return name;
  const size_t head = (size_t)(suffix - name);
  if (!strcmp(suffix, from[0])) {
    snprintf(buf, cap, "%.*s%s", (int)head, name, to[0]);
    return buf;
  }
  const char *e = "mlp.experts.";
  if (strncmp(suffix, e, strlen(e))) return name;
  const char *p = suffix + strlen(e), *d = p;
  while (*d >= '0' && *d <= '9')
    d++;
  if (d == p || *d != '.') return name;
  for (int k = 1; k < 4; k++)
    if (!strcmp(d + 1, from[k])) {
      snprintf(buf, cap, "%.*s" MOE_PREFIX "experts.%.*s.%s", (int)head, name, (int)(d - p), p, to[k]);
      return buf;
    }
  return name;
}

/* A buffer that holds no weights (GPT-2's causal mask, Llama's inverse
 * frequencies) in one of the model's blocks. */
static int is_buffer(const aa_gpt_t *m, const family_t *fam, const char *name) {
  const char *suffix;
  long l = block_of(fam, name, &suffix);
  if (l < 0 || l >= m->arch.n_layer) return 0;
  for (int k = 0; k < fam->n_buffers; k++)
    if (!strcmp(suffix, fam->buffers[k])) return 1;
  return 0;
}

static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(out, cap, "[");
  for (int i = 0; i < ndim && at < cap; i++)
    at += (size_t)snprintf(out + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (at < cap) snprintf(out + at, cap - at, "]");
}

static int check_model(const aa_gpt_t *m, const char *what) {
  if (strcmp(m->arch.family, "gpt2") && !aa_arch_is_llama(&m->arch))
    return aa_error(AA_EINVAL, "%s: the model's family is %s; only gpt2 and llama are supported", what,
                    m->arch.family);
  if (m->tp > 1 || m->pp > 1 || !m->params.data)
    return aa_error(AA_EINVAL, "%s: needs a whole model with fp32 parameters (tensor and pipeline degree 1)",
                    what);
  return 0;
}

/* Writes numel host values src into m's tensor t from its element
 * offset on (the engine's layout). */
static int put(aa_gpt_t *m, const aa_tensor_desc_t *t, size_t offset, size_t numel, const float *src) {
  return m->ops->upload((float *)m->params.data + t->offset + offset, src, numel * sizeof(float));
}

/* Qwen's shared-expert tensor h (hf_tensor_t scatter) into the engine's S
 * experts: gate_proj's or up_proj's block s of Fe rows (in buf) to the
 * first or second half of expert s's w13 rows; down_proj (in src, rows c
 * of S blocks of Fe) rearranged through buf into the S (C, Fe) w2's. */
static int put_shared(aa_gpt_t *m, const hf_tensor_t *h, float *buf, const float *src) {
  const aa_tensor_desc_t *t = &m->tensors[h->tensor];
  const size_t C = (size_t)m->arch.d_model, Fe = (size_t)m->arch.moe.d_ff_expert,
               S = (size_t)m->arch.moe.shared_experts;
  int rc = 0;
  if (h->scatter != 3) {
    for (size_t s = 0; s < S && !rc; s++)
      rc = put(m, t, s * 2 * Fe * C + (h->scatter == 2 ? Fe * C : 0), Fe * C, buf + s * Fe * C);
    return rc;
  }
  for (size_t c = 0; c < C; c++)
    for (size_t s = 0; s < S; s++)
      memcpy(buf + s * C * Fe + c * Fe, src + c * S * Fe + s * Fe, Fe * sizeof *buf);
  return put(m, t, 0, S * C * Fe, buf);
}

/* dst (rows x cols) = the transpose of src (cols x rows). */
static void transpose(float *dst, const float *src, size_t rows, size_t cols) {
  for (size_t c = 0; c < cols; c++)
    for (size_t r = 0; r < rows; r++)
      dst[r * cols + c] = src[c * rows + r];
}

/* The source element types seen (a bit per aa_st_dtype_t) in words. */
static void dtype_words(aa_import_info_t *info, unsigned seen) {
  size_t at = 0;
  info->dtypes[0] = '\0';
  for (int d = 0; d < AA_ST_N_DTYPES; d++)
    if ((seen >> d) & 1u && at < sizeof info->dtypes)
      at += (size_t)snprintf(info->dtypes + at, sizeof info->dtypes - at, "%s%s", at ? "+" : "",
                             aa_st_dtype_name((aa_st_dtype_t)d));
}

/* --- safetensors --------------------------------------------------------------- */

/* One tensor offered by the source: its name as the file gives it, and
 * where its data is. */
typedef struct {
  const char *name;
  const aa_st_file_t *f;
  const aa_st_tensor_t *t;
} offer_t;

typedef struct {
  aa_st_file_t **files;
  int n_files;
  offer_t *offers;
  int n_offers;
  json_t *index;    /* the shard index, owning the offers' names (NULL for one file) */
  const char *path; /* the file or the index (borrowed) */
} source_t;

static void source_free(source_t *s) {
  for (int i = 0; i < s->n_files; i++)
    aa_st_close(s->files[i]);
  free(s->files);
  free(s->offers);
  json_decref(s->index);
}

static int open_single(source_t *s, const char *path) {
  s->files = calloc(1, sizeof *s->files);
  if (!s->files) return aa_error(AA_ENOMEM, "out of memory");
  int rc = aa_st_open(&s->files[0], path);
  if (rc) return rc;
  s->n_files = 1;
  const aa_st_file_t *f = s->files[0];
  s->offers = calloc((size_t)(f->n ? f->n : 1), sizeof *s->offers);
  if (!s->offers) return aa_error(AA_ENOMEM, "out of memory");
  for (int i = 0; i < f->n; i++)
    s->offers[s->n_offers++] = (offer_t){f->tensors[i].name, f, &f->tensors[i]};
  return 0;
}

/* Reads a model.safetensors.index.json and opens every shard it names
 * (plain file names in its directory), each once. */
static int open_index(source_t *s, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  int rc = aa_read_file(path, AA_IMPORT_INDEX_MAX, "a shard index", &buf, &len);
  if (rc) return rc;
  json_error_t jerr;
  s->index = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
  free(buf);
  if (!s->index) return aa_error(AA_EPARSE, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
  if (!json_is_object(s->index)) return aa_error(AA_EFORMAT, "%s: a shard index must be a JSON object", path);
  const char *key;
  json_t *v;
  json_object_foreach(s->index, key, v) {
    if (strcmp(key, "metadata") && strcmp(key, "weight_map"))
      return aa_error(AA_EFORMAT, "%s: unknown key '%.64s' (allowed: metadata, weight_map)", path, key);
  }
  json_t *map = json_object_get(s->index, "weight_map");
  if (!json_is_object(map) || json_object_size(map) == 0)
    return aa_error(AA_EFORMAT, "%s: weight_map must be a non-empty object of tensor name to file name",
                    path);
  size_t n = json_object_size(map);
  const char **names = calloc(n, sizeof *names);
  s->offers = calloc(n, sizeof *s->offers);
  s->files = calloc(n < AA_IMPORT_MAX_SHARDS ? n : AA_IMPORT_MAX_SHARDS, sizeof *s->files);
  if (!names || !s->offers || !s->files) {
    free(names);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  char dir[AA_PATH_MAX], file[AA_PATH_MAX];
  const char *slash = strrchr(path, '/');
  int dl = slash ? (int)(slash - path) : 0;
  snprintf(dir, sizeof dir, "%.*s", slash ? dl : 1, slash ? path : ".");
  json_object_foreach(map, key, v) {
    const char *fn = json_string_value(v);
    if (!fn || !*fn || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..") || strlen(fn) > 255) {
      rc = aa_error(AA_EFORMAT, "%s: weight_map['%.64s'] must be a plain file name in the index's directory",
                    path, key);
      break;
    }
    int k = 0;
    while (k < s->n_files && strcmp(names[k], fn))
      k++;
    if (k == s->n_files) {
      if (s->n_files == AA_IMPORT_MAX_SHARDS) {
        rc = aa_error(AA_EFORMAT, "%s: more than %d shard files", path, AA_IMPORT_MAX_SHARDS);
        break;
      }
      if (snprintf(file, sizeof file, "%s/%s", dir, fn) >= (int)sizeof file) {
        rc = aa_error(AA_EINVAL, "%s: shard path too long", path);
        break;
      }
      if ((rc = aa_st_open(&s->files[k], file))) break;
      names[k] = fn;
      s->n_files++;
    }
    const aa_st_tensor_t *t = aa_st_find(s->files[k], key);
    if (!t) {
      rc = aa_error(AA_EFORMAT, "%s: weight_map puts tensor '%.255s' in %s, which has no such tensor", path,
                    key, fn);
      break;
    }
    s->offers[s->n_offers++] = (offer_t){key, s->files[k], t};
  }
  free(names);
  return rc;
}

static int ends_with(const char *s, const char *sfx) {
  size_t n = strlen(s), k = strlen(sfx);
  return n >= k && !strcmp(s + n - k, sfx);
}

/* The index of the output head among m's n Hugging Face tensors when it
 * is a tensor of its own (llama's head.w, the last), else -1 (GPT-2's head
 * is wte). */
static int head_index(const aa_gpt_t *m, int n) {
  return !strcmp(m->tensors[m->n_tensors - 1].name, "head.w") ? n - 1 : -1;
}

/* Matches every offered tensor to one of m's n Hugging Face tensors (hf,
 * and sorted by name) and checks names, shapes and dtypes; want[i] is the
 * offer for hf[i], *lm_head GPT-2's (tied) head's. A llama model without
 * an offered head gets wte's offer for it (a tied checkpoint), and info
 * says so. Qwen-MoE's names of a sparse block's tensors are read as
 * Mixtral's; its shared expert's sigmoid gate is refused. */
static int match(const aa_gpt_t *m, const family_t *fam, const hf_tensor_t *hf,
                 const hf_tensor_t *const *sorted, int n, const source_t *s, const offer_t **want,
                 const offer_t **lm_head, aa_import_info_t *info) {
  char a[96], b[96], canon[128];
  unsigned seen = 0;
  const size_t pl = strlen(fam->prefix);
  const int head = head_index(m, n);
  const int qwen = qwen_moe(&m->arch);
  /* Named first, before the shared expert it gates reads as unexpected. */
  for (int o = 0; o < s->n_offers && fam == &llama_family && !qwen; o++)
    if (ends_with(s->offers[o].name, ".mlp.shared_expert_gate.weight"))
      return aa_error(AA_EINVAL,
                      "%s: tensor '%s' is Qwen-MoE's sigmoid gate on its shared expert: the spec needs "
                      "model.moe.shared_expert_gate true and shared_experts = the checkpoint's "
                      "shared_expert_intermediate_size / moe_intermediate_size (docs/checkpoint-format.md)",
                      s->offers[o].f->path, s->offers[o].name);
  for (int o = 0; o < s->n_offers; o++) {
    const offer_t *of = &s->offers[o];
    const char *name = of->name;
    if (!strncmp(name, fam->prefix, pl)) name += pl;
    if (is_buffer(m, fam, name)) {
      info->ignored++;
      continue;
    }
    if (!qwen) name = mixtral_name(fam, name, canon, sizeof canon);
    int i = -1, beyond = 0;
    const hf_tensor_t *h;
    hf_tensor_t gpt2_head;
    if (head < 0 && !strcmp(name, "lm_head.weight")) {
      if (*lm_head) return aa_error(AA_EINVAL, "%s: tensor 'lm_head.weight' appears twice", of->f->path);
      *lm_head = of;
      gpt2_head = hf[0];
      h = &gpt2_head;
    } else {
      i = hf_index(m, fam, hf, sorted, n, name, &beyond);
      if (i < 0 && beyond)
        return aa_error(AA_EINVAL, "%s: tensor '%s' belongs to a block the model does not have (n_layer %d)",
                        of->f->path, of->name, m->arch.n_layer);
      if (i < 0 && fam == &llama_family && !m->arch.qkv_bias &&
          (ends_with(name, "self_attn.q_proj.bias") || ends_with(name, "self_attn.k_proj.bias") ||
           ends_with(name, "self_attn.v_proj.bias")))
        return aa_error(
            AA_EINVAL,
            "%s: tensor '%s' is a q/k/v projection bias (Qwen2): the spec needs model.qkv_bias true",
            of->f->path, of->name);
      if (i < 0)
        return aa_error(AA_EINVAL, "%s: unexpected tensor '%s' (not a %s weight)", of->f->path, of->name,
                        qwen                  ? "mixture-of-experts Qwen2-MoE"
                        : m->arch.moe.experts ? "mixture-of-experts Llama (Mixtral)"
                                              : fam->title);
      if (want[i])
        return aa_error(AA_EINVAL, "%s: tensor '%s' appears twice (as '%s' and '%s')", of->f->path, name,
                        want[i]->name, of->name);
      want[i] = of;
      h = &hf[i];
    }
    const aa_st_tensor_t *t = of->t;
    int same = t->ndim == h->ndim;
    for (int d = 0; same && d < h->ndim; d++)
      same = t->shape[d] == h->shape[d];
    if (!same) {
      shape_str(a, sizeof a, t->ndim, t->shape);
      shape_str(b, sizeof b, h->ndim, h->shape);
      return aa_error(AA_EINVAL, "%s: tensor '%s' has shape %s but the model needs %s", of->f->path, of->name,
                      a, b);
    }
    if (t->dtype != AA_ST_F32 && t->dtype != AA_ST_BF16 && t->dtype != AA_ST_F16)
      return aa_error(AA_EINVAL, "%s: tensor '%s' is %s; weights must be F32, BF16 or F16", of->f->path,
                      of->name, aa_st_dtype_name(t->dtype));
    seen |= 1u << t->dtype;
  }
  if (head >= 0 && !want[head] && want[0]) {
    want[head] = want[0];
    info->tied_head = 1;
  }
  for (int i = 0; i < n; i++)
    if (!want[i])
      return aa_error(AA_EINVAL, "%s: missing tensor '%s%s'", s->path, i == head ? "" : fam->export_prefix,
                      hf[i].hf);
  dtype_words(info, seen);
  return 0;
}

static int import_safetensors(aa_gpt_t *m, const char *path, int sharded, aa_import_info_t *info) {
  const family_t *fam = family_of(m);
  const int n = hf_count(m);
  source_t s = {.path = path};
  const offer_t **want = calloc((size_t)n, sizeof *want);
  hf_tensor_t *hf = calloc((size_t)n, sizeof *hf);
  const hf_tensor_t **sorted = calloc((size_t)n, sizeof *sorted);
  const offer_t *lm_head = NULL;
  float *buf = NULL, *tmp = NULL;
  int rc = want && hf && sorted ? 0 : aa_error(AA_ENOMEM, "out of memory");
  if (!rc) rc = hf_names(m, fam, hf, n);
  if (!rc) {
    for (int i = 0; i < n; i++)
      sorted[i] = &hf[i];
    qsort(sorted, (size_t)n, sizeof *sorted, by_hf_name);
  }
  if (!rc) rc = sharded ? open_index(&s, path) : open_single(&s, path);
  if (!rc) rc = match(m, fam, hf, sorted, n, &s, want, &lm_head, info);
  if (rc) goto cleanup;
  size_t max = 0;
  for (int i = 0; i < n; i++)
    if (hf[i].numel > max) max = hf[i].numel;
  buf = malloc(max * sizeof *buf);
  tmp = malloc(max * sizeof *tmp);
  if (!buf || !tmp) {
    rc = aa_error(AA_ENOMEM, "out of memory for a %zu-element tensor", max);
    goto cleanup;
  }
  if (lm_head) {
    /* A tied head holds wte's values; any other head cannot be kept. */
    if ((rc = aa_st_read_f32(lm_head->f, lm_head->t, buf)) ||
        (rc = aa_st_read_f32(want[0]->f, want[0]->t, tmp)))
      goto cleanup;
    if (memcmp(buf, tmp, m->tensors[0].numel * sizeof *buf)) {
      rc =
          aa_error(AA_EINVAL,
                   "%s: tensor '%s' differs from '%s': an untied output head, which a gpt2 model cannot hold",
                   lm_head->f->path, lm_head->name, want[0]->name);
      goto cleanup;
    }
    info->ignored++;
  }
  for (int i = 0; i < n && !rc; i++) {
    if ((rc = aa_st_read_f32(want[i]->f, want[i]->t, hf[i].transpose || hf[i].scatter == 3 ? tmp : buf)))
      break;
    if (hf[i].transpose) transpose(buf, tmp, (size_t)hf[i].shape[1], (size_t)hf[i].shape[0]);
    if (hf[i].scatter)
      rc = put_shared(m, &hf[i], buf, tmp);
    else
      rc = put(m, &m->tensors[hf[i].tensor], hf[i].offset, hf[i].numel, buf);
  }
  info->format = sharded ? AA_IMPORT_SHARDED : AA_IMPORT_SAFETENSORS;
  info->files = s.n_files;
  info->tensors = n - info->tied_head;
cleanup:
  free(buf);
  free(tmp);
  free(want);
  free(hf);
  free(sorted);
  source_free(&s);
  return rc;
}

/* --- llm.c --------------------------------------------------------------------- */

#define LLMC_HEADER_INTS 256

static int import_llmc(aa_gpt_t *m, const char *path, int fd, uint64_t size, aa_import_info_t *info) {
  int32_t h[LLMC_HEADER_INTS];
  unsigned char raw[LLMC_HEADER_INTS * 4];
  if (size < sizeof raw)
    return aa_error(AA_EFORMAT, "%s: too short for an llm.c checkpoint header (%llu bytes)", path,
                    (unsigned long long)size);
  if (pread(fd, raw, sizeof raw, 0) != (ssize_t)sizeof raw)
    return aa_error(AA_EIO, "%s: cannot read the header: %s", path, strerror(errno));
  for (int i = 0; i < LLMC_HEADER_INTS; i++)
    h[i] = (int32_t)aa_get_le32(raw + 4 * i);
  if (h[1] != 3 && h[1] != 5)
    return aa_error(AA_EFORMAT, "%s: llm.c checkpoint version %d (this build reads 3, fp32, and 5, bf16)",
                    path, h[1]);
  const aa_arch_t *a = &m->arch;
  static const char *fields[] = {"max_seq_len", "vocab_size", "num_layers", "num_heads", "channels"};
  const int want[] = {a->seq_len, a->vocab_size, a->n_layer, a->n_head, a->d_model};
  static const char *spec_fields[] = {"seq_len", "vocab_size", "n_layer", "n_head", "d_model"};
  for (int i = 0; i < 5; i++)
    if (h[2 + i] != want[i])
      return aa_error(AA_EINVAL, "%s: llm.c header %s is %d but the model's %s is %d", path, fields[i],
                      h[2 + i], spec_fields[i], want[i]);
  if (a->d_ff != 4 * a->d_model)
    return aa_error(AA_EINVAL, "%s: llm.c's GPT-2 has d_ff = 4 d_model (%d) but the model's d_ff is %d", path,
                    4 * a->d_model, a->d_ff);
  const int Vp = h[7];
  if (Vp < a->vocab_size || Vp > a->vocab_size + (1 << 20))
    return aa_error(AA_EFORMAT, "%s: llm.c header padded_vocab_size %d is not in [%d, %d]", path, Vp,
                    a->vocab_size, a->vocab_size + (1 << 20));
  const uint64_t C = (uint64_t)a->d_model, L = (uint64_t)a->n_layer, T = (uint64_t)a->seq_len, F = 4 * C;
  /* llm.c's 16 arrays (fill_in_parameter_sizes), block arrays over all L blocks. */
  const uint64_t sizes[16] = {(uint64_t)Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                              L * C * C,        L * C, L * C, L * C, L * F * C,     L * F,
                              L * C * F,        L * C, C,     C};
  const size_t es = h[1] == 3 ? 4 : 2;
  uint64_t start[16], total = 0;
  for (int k = 0; k < 16; k++) {
    start[k] = total;
    total += sizes[k];
  }
  if (size != sizeof raw + total * es)
    return aa_error(AA_EFORMAT, "%s: %llu bytes, but an llm.c checkpoint of this model (version %d) has %llu",
                    path, (unsigned long long)size, h[1], (unsigned long long)(sizeof raw + total * es));
  size_t max = 0;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].numel > max) max = m->tensors[i].numel;
  float *buf = malloc(max * sizeof *buf);
  if (!buf) return aa_error(AA_ENOMEM, "out of memory for a %zu-element tensor", max);
  int rc = 0;
  for (int i = 0; i < m->n_tensors && !rc; i++) {
    const aa_tensor_desc_t *t = &m->tensors[i];
    /* Array k holds tensor i; a block's tensor is the layer's slice of it. */
    int k = i < 2                   ? i
            : i >= m->n_tensors - 2 ? 14 + (i - (m->n_tensors - 2))
                                    : 2 + (i - 2) % AA_TENSORS_PER_LAYER;
    uint64_t at = start[k] + (t->layer >= 0 ? (uint64_t)t->layer * t->numel : 0);
    uint64_t off = sizeof raw + at * es, bytes = t->numel * es;
    /* bf16 values go to the second half of buf and widen front to back. */
    unsigned char *dst = es == 4 ? (unsigned char *)buf : (unsigned char *)buf + bytes;
    for (uint64_t done = 0; done < bytes && !rc;) {
      ssize_t r = pread(fd, dst + done, bytes - done, (off_t)(off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        rc = aa_error(AA_EIO, "%s: read failed: %s", path, r ? strerror(errno) : "unexpected end of file");
      else
        done += (uint64_t)r;
    }
    if (rc) break;
    if (es == 2)
      for (size_t j = 0; j < t->numel; j++)
        buf[j] = aa_bf16_to_f32((uint16_t)(dst[2 * j] | dst[2 * j + 1] << 8));
    rc = put(m, t, 0, t->numel, buf);
  }
  free(buf);
  info->format = AA_IMPORT_LLMC;
  info->files = 1;
  info->tensors = 16;
  snprintf(info->dtypes, sizeof info->dtypes, "%s", es == 4 ? "F32" : "BF16");
  return rc;
}

/* --- entry points --------------------------------------------------------------- */

int aa_import_weights(aa_gpt_t *m, const char *src, aa_import_info_t *info) {
  aa_import_info_t local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  int rc = check_model(m, src);
  if (rc) return rc;
  struct stat sb;
  if (stat(src, &sb))
    return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", src, strerror(errno));
  char path[AA_PATH_MAX];
  if (S_ISDIR(sb.st_mode)) {
    if (snprintf(path, sizeof path, "%s/model.safetensors.index.json", src) >= (int)sizeof path)
      return aa_error(AA_EINVAL, "%s: path too long", src);
    if (!access(path, F_OK)) {
      rc = import_safetensors(m, path, 1, info);
    } else {
      snprintf(path, sizeof path, "%s/model.safetensors", src);
      if (access(path, F_OK))
        return aa_error(AA_ENOENT, "%s: holds neither model.safetensors.index.json nor model.safetensors",
                        src);
      rc = import_safetensors(m, path, 0, info);
    }
  } else if (ends_with(src, ".json")) {
    rc = import_safetensors(m, src, 1, info);
  } else {
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", src, strerror(errno));
    unsigned char magic[4];
    struct stat fb;
    int llmc = !fstat(fd, &fb) && S_ISREG(fb.st_mode) && pread(fd, magic, 4, 0) == 4 &&
               aa_get_le32(magic) == AA_LLMC_MAGIC;
    if (llmc && aa_arch_is_llama(&m->arch))
      rc = aa_error(AA_EINVAL, "%s: an llm.c checkpoint holds GPT-2 weights, but the model is llama", src);
    else
      rc = llmc ? import_llmc(m, src, fd, (uint64_t)fb.st_size, info) : import_safetensors(m, src, 0, info);
    close(fd);
  }
  if (!rc) aa_gpt_params_changed(m);
  return rc;
}

typedef struct {
  const aa_gpt_t *m;
  const hf_tensor_t *hf;
  float *tmp;
} export_t;

static int export_fill(int i, float *dst, size_t numel, void *data) {
  export_t *e = data;
  const hf_tensor_t *h = &e->hf[i];
  const aa_tensor_desc_t *t = &e->m->tensors[h->tensor];
  const int tr = h->transpose;
  (void)numel;
  const float *p = (const float *)e->m->params.data + t->offset;
  if (h->scatter) {
    /* Qwen's shared expert gathered from the S engine experts
     * (put_shared's inverse). */
    const size_t C = (size_t)e->m->arch.d_model, Fe = (size_t)e->m->arch.moe.d_ff_expert,
                 S = (size_t)e->m->arch.moe.shared_experts;
    int rc = 0;
    if (h->scatter != 3) {
      for (size_t s = 0; s < S && !rc; s++)
        rc = e->m->ops->download(dst + s * Fe * C, p + s * 2 * Fe * C + (h->scatter == 2 ? Fe * C : 0),
                                 Fe * C * sizeof(float));
      return rc;
    }
    if ((rc = e->m->ops->download(e->tmp, p, S * C * Fe * sizeof(float)))) return rc;
    for (size_t c = 0; c < C; c++)
      for (size_t s = 0; s < S; s++)
        memcpy(dst + c * S * Fe + s * Fe, e->tmp + s * C * Fe + c * Fe, Fe * sizeof *dst);
    return 0;
  }
  int rc = e->m->ops->download(tr ? e->tmp : dst, p + h->offset, h->numel * sizeof(float));
  if (rc) return rc;
  if (tr) transpose(dst, e->tmp, (size_t)h->shape[0], (size_t)h->shape[1]);
  return 0;
}

int aa_export_weights(const aa_gpt_t *m, const char *path, aa_dtype_t dtype) {
  int rc = check_model(m, path);
  if (rc) return rc;
  const family_t *fam = family_of(m);
  const int n = hf_count(m), head = head_index(m, n);
  aa_st_entry_t *e = calloc((size_t)n, sizeof *e);
  hf_tensor_t *h = calloc((size_t)n, sizeof *h);
  /* The names as written: the family's prefix before all but the head. */
  char(*names)[128] = calloc((size_t)n, sizeof *names);
  size_t max = 0;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].numel > max) max = m->tensors[i].numel;
  export_t x = {m, h, malloc(max * sizeof(float))};
  if (!e || !h || !names || !x.tmp) {
    rc = aa_error(AA_ENOMEM, "out of memory");
    goto cleanup;
  }
  if ((rc = hf_names(m, fam, h, n))) goto cleanup;
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "%s%s", i == head ? "" : fam->export_prefix, h[i].hf);
    e[i].name = names[i];
    e[i].ndim = h[i].ndim;
    e[i].shape[0] = h[i].shape[0];
    e[i].shape[1] = h[i].shape[1];
  }
  rc = aa_st_write(path, dtype, e, n, export_fill, &x);
cleanup:
  free(e);
  free(h);
  free(names);
  free(x.tmp);
  return rc;
}

int aa_export_tensors(const aa_gpt_t *m) { return hf_count(m); }
