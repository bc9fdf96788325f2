/* Checkpoints: one file holding the model's flat parameters and, for a
 * training checkpoint, the AdamW moments plus everything needed to resume
 * bit-identically (step, RNG state, data position). Format:
 * docs/checkpoint-format.md. */
#ifndef AA_CHECKPOINT_H
#define AA_CHECKPOINT_H

#include <stdbool.h>
#include <stdio.h>

#include "loss_scale.h"
#include "model.h"
#include "optim.h"

#define AA_CKPT_MAGIC "AACKPT\0\0"
#define AA_CKPT_VERSION 1
#define AA_CKPT_HEADER_BYTES 256

/* Training position saved beside the weights. */
typedef struct aa_train_state {
  int step;          /* completed optimizer steps */
  uint64_t data_pos; /* train loader position */
  aa_rng_t rng;      /* trainer RNG state */
  uint64_t seed;     /* the run's seed (informational) */
  /* fp16 loss scaler (scale 0 in the file = none was running) and the
   * number of optimizer steps skipped for non-finite gradients. */
  double loss_scale;
  int64_t scaler_iter, scaler_last_overflow;
  int32_t scaler_hysteresis_left;
  int64_t skipped_steps;
} aa_train_state_t;

/* Writes m's parameters, opt's moments (opt may be NULL: weights only) and
 * st (may be NULL) to path; m must hold the whole model (tensor and
 * pipeline degree 1, else AA_EINVAL). Written to a fresh temporary in
 * path's directory, fsynced, then renamed over path (common/file.h), so an
 * interrupted save never leaves a torn file under path and a symlink at
 * path is replaced, never written through. */
int aa_ckpt_save(const char *path, const aa_gpt_t *m, const aa_adamw_t *opt, const aa_train_state_t *st);

/* Reads a checkpoint into m (whose architecture must match the file's; the
 * error names the first differing field) and, when opt is non-NULL, the
 * optimizer moments (error if the file has none) and st. path is a
 * single-file checkpoint or the manifest of a sharded one (any data,
 * tensor and pipeline degree), which is gathered back into m's full
 * buffers (a tensor or pipeline rank's model: what it holds). Validates
 * magic, version, sizes and the payload checksum of every file before
 * touching m. */
int aa_ckpt_load(const char *path, aa_gpt_t *m, aa_adamw_t *opt, aa_train_state_t *st);

/* Checkpoint of a data- and tensor-parallel run: every rank of the gang
 * (z's data group times m's tensor group, m->opts.tensor) calls it with
 * the same path and state, and every rank gets the same result (an error
 * on one rank is an error on all, so none goes on believing the save
 * succeeded). Without tensor parallelism: at ZeRO stage 0 every rank holds
 * the same state and rank 0 writes the single-file format to path; at
 * stages 1-3 each rank writes its chunks of the parameters and moments
 * (the replicated state in the header) to "path.rank<r>of<world>". With
 * it, each tensor rank's state is its slice of the model in its own
 * layout (model.h), written as above to "path.tp<t>of<tp>.rank<r>of<n>":
 * at stage 0 by data rank 0 alone (n = 1), else by every data rank (n =
 * the data group's size). Once all files are in place, rank 0 of both
 * groups writes the JSON manifest to path, naming each file with its
 * checksum (and its tensor rank), so a manifest only ever describes a
 * complete save (docs/checkpoint-format.md). m is not changed; it is not
 * const because the tensor group's agreement passes through its
 * workspace. A pipeline rank's model (m->pp > 1) needs
 * aa_ckpt_save_pipe (AA_EINVAL here). Under expert parallelism (m->ep > 1,
 * any ZeRO stage) every rank gathers its own model's state whole (from
 * ZeRO 1 each piece's chunks over its group, optim.h aa_zero_gather),
 * sends its expert slices to the expert group (an all-gather over
 * m->opts.expert), the tensor ranks' slices and the pipeline stages' units
 * are summed into place over their groups (aa_ckpt_save_pipe), and rank 0
 * writes the whole model in the single-file format; the loads
 * read a rank's slices, or its chunks of them, of any checkpoint through
 * the tables, as they do a tensor rank's. */
int aa_ckpt_save_zero(const char *path, aa_gpt_t *m, aa_zero_t *z, const aa_train_state_t *st);

/* aa_ckpt_save_zero for a gang that may also be pipeline-parallel: pipe
 * is the rank's pipeline group (borrowed; NULL allowed at pp 1), over
 * which the ranks agree as over the other two. At pp > 1 every rank
 * writes the units it holds, except the last stage's copy of wte|wpe (the
 * first stage's is saved), to "path.pp<p>of<pp>.tp<t>of<tp>.rank<r>of<n>"
 * (n as above), its pipeline place in the header, and rank 0 of all three
 * groups (pipeline rank 0) writes a version 3 manifest with the pipeline
 * layout, read back from the files' headers. A group of one serves a rank
 * saved on its own (a test that builds every rank's model in one
 * process): pipeline rank 0 must then save last, since its manifest names
 * the files of every pipeline rank. Over a pipeline group of more than
 * one rank the agreement stages its sums through 16 floats of m's backend
 * memory, allocated and freed within the call. */
int aa_ckpt_save_pipe(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_comm_t *pipe,
                      const aa_train_state_t *st);

/* aa_ckpt_save_pipe without the optimizer state (Merak's no_save_optim,
 * `train --weights-only-checkpoints`): the same files with the parameters
 * alone (flag bit 0 clear, one payload section; the training state in the
 * header as before), a third of the size. A whole-model file of it also
 * serves as init_weights. Under expert parallelism the one whole-model
 * file aa_ckpt_save_pipe writes there, with the parameters alone. */
int aa_ckpt_save_weights(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_comm_t *pipe,
                         const aa_train_state_t *st);

/* aa_ckpt_load into what this rank of z holds: path is a single-file
 * checkpoint or a manifest written at any data, tensor and pipeline degree
 * and stage (m may be a pipeline rank's model: it reads the units it
 * holds, its copy of wte|wpe from the saved first stage's); only the
 * slices the rank needs are read, re-sharded through the saved layout's
 * tensor tables and m's when the layouts differ (every file read from is
 * checksummed whole first, and nothing changes unless every check
 * passes). With st NULL only the parameters are read (init_weights). */
int aa_ckpt_load_zero(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_train_state_t *st);

/* aa_ckpt_load_zero of a checkpoint to resume from (st non-NULL): the
 * parameters and the training state, and the optimizer moments when the
 * checkpoint holds them. *optimizer says whether it did; when not (a
 * weights-only save), z's optimizer is left as it was (a fresh one:
 * zero moments, AdamW step 0) and the caller says so. */
int aa_ckpt_load_resume(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_train_state_t *st, bool *optimizer);

/* Retention of a run's step checkpoints (`train --keep-last N`, Merak's
 * save_total_limit), called once the checkpoint of `step` is completely
 * written (every rank's file and the manifest): of the checkpoints named
 * "step_<6+ digits>.ckpt" in dir with a smaller step, all but the keep - 1
 * newest are deleted, each checkpoint (a file or a manifest) before the
 * rank files "step_N.ckpt.rank..|.tp..|.pp.." it names, and a line per
 * deleted checkpoint goes to log (may be NULL). Checkpoints of a later
 * step (another run's in the same folder), final.ckpt and every other
 * name are left alone; entries are unlinked relative to the folder, so a
 * symlink is removed itself and never followed, and a folder is skipped.
 * keep <= 0: nothing. 0, or AA_EIO naming the entry that could not be
 * read or deleted (the checkpoints are still there). */
int aa_ckpt_retain(const char *dir, int keep, int step, FILE *log);

#endif
