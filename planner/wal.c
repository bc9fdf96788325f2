/* The store's WAL upkeep (docs/service.md "Recovery"). SQLite's automatic
 * checkpoints reuse the WAL file once it passes 1000 pages (about 4 MiB)
 * but never shrink it, so on a filesystem smaller than that the WAL fills
 * it on its own, and the frames it holds keep the disk full after room is
 * made: the next job failed again. The planner therefore truncates the WAL
 * (aa_store_checkpoint) on its tick:
 *   - once a write error has cleared: the store refused a write for lack of
 *     room or of the disk, and a later write committed;
 *   - while no job runs, when the WAL has grown past
 *     AA_PLANNER_WAL_IDLE_BYTES; the file is looked at once every
 *     AA_PLANNER_WAL_EVERY_S at most.
 * A checkpoint never waits for other connections: one a reader keeps from
 * completing, or one that fails, is tried again AA_PLANNER_WAL_EVERY_S
 * later, and logged once until one succeeds. */
#include "planner_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* Writes bytes as "0", "812 B", "96.0 KiB" or "1.5 MiB". */
static const char *human(char buf[32], int64_t bytes) {
  if (bytes == 0)
    snprintf(buf, 32, "0");
  else if (bytes < 1024)
    snprintf(buf, 32, "%" PRId64 " B", bytes);
  else if (bytes < (1 << 20))
    snprintf(buf, 32, "%.1f KiB", (double)bytes / 1024);
  else
    snprintf(buf, 32, "%.1f MiB", (double)bytes / (1 << 20));
  return buf;
}

void aa__wal_tick(aa_planner_t *p) {
  double now = aa_now();
  if (now < p->wal.retry_at) return;
  bool failing;
  uint64_t failures = aa_store_io_failures(p->store, &failing);
  bool cleared = failures != p->wal.failures_seen && !failing;
  int64_t bytes;
  if (!cleared) {
    if (p->cur || now < p->wal.look_at) return;
    p->wal.look_at = now + AA_PLANNER_WAL_EVERY_S;
    if (aa_store_wal_bytes(p->store, &bytes) || bytes < AA_PLANNER_WAL_IDLE_BYTES) return;
  }
  int64_t before = 0, after = 0;
  int rc = aa_store_checkpoint(p->store, &before, &after);
  const char *why = cleared ? "a write error cleared" : "the planner is idle";
  char a[32], b[32];
  if (rc == 0) {
    p->wal.failures_seen = failures;
    p->wal.complained = false;
    p->wal.look_at = now + AA_PLANNER_WAL_EVERY_S;
    aa__planner_log(p, "store: WAL checkpointed and truncated (%s -> %s): %s", human(a, before),
                    human(b, after), why);
    return;
  }
  p->wal.retry_at = now + AA_PLANNER_WAL_EVERY_S;
  if (p->wal.complained) return;
  p->wal.complained = true;
  if (rc > 0)
    aa__planner_log(p,
                    "store: the WAL (%s) cannot be truncated yet: another connection reads an older "
                    "snapshot or writes (%s); trying again every %d s",
                    human(a, before), why, AA_PLANNER_WAL_EVERY_S);
  else
    aa__planner_log(p, "store: the WAL cannot be truncated: %s (%s); trying again every %d s",
                    aa_last_error(), why, AA_PLANNER_WAL_EVERY_S);
}
