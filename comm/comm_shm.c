/* The shared-memory process group (comm.h, backend "shm"; design in
 * docs/comm.md).
 *
 * One POSIX shm segment per family (the group of aa_comm_init and every
 * group split from it):
 *
 *   header   magic (written last by rank 0: the segment is ready), sizes,
 *            the family's abort word, and per world rank a robust
 *            process-shared mutex that the rank holds while it is in the
 *            family (a dead holder turns it EOWNERDEAD), joined/left flags
 *            and the pid
 *   regions  one per live group (region 0 is the world): a control block
 *            (barrier counter and generation, an event futex word, per member
 *            the barrier it reached and its point-to-point queue) and one
 *            slot per member: two staging halves for collectives and two
 *            point-to-point entries
 *
 * A member writes only its own slot. Collectives move data in steps that
 * alternate between the two halves: a step writes the own half, passes a
 * barrier, reads the others' halves. Before a member writes a half again two
 * steps later it has passed the barrier of the step between, which every
 * member reached only after finishing its reads of that half; so one or two
 * barriers per step suffice and no step waits for readers.
 *
 * Waiters sleep on the region's event word (FUTEX_WAIT without the private
 * flag, so it works across processes); wakers bump the word and call
 * FUTEX_WAKE only when someone sleeps. Before it sleeps, a waiter looks for
 * up to SPIN_NS with sched_yield() between looks: waking a sleeping CPU
 * takes tens of microseconds (more in a VM), which made small collectives
 * 2-6x and 4 MiB ones up to 2x slower, while the yield hands the CPU to a peer
 * that shares it (4 ranks on 2 cores ran faster this way than sleeping at
 * once; a plain spin there stalled each barrier for the whole spin). Every
 * sleep lasts at most PROBE_MS, after which the waiter checks the abort
 * word, probes the peers' mutexes (pthread_mutex_trylock: EOWNERDEAD or
 * ENOTRECOVERABLE means the holder died, even while it is an unreaped
 * zombie) and its deadline. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

#define SHM_MAGIC 0x61614347u /* "aaCG" */
#define SHM_VERSION 1u
#define MAX_WORLD 256
#define PAGE ((size_t)4096)
#define PROBE_MS 100     /* longest sleep between abort/liveness/deadline checks */
#define SPIN_NS 200000   /* look (yielding the CPU) this long before sleeping */
#define OPEN_RETRY_MS 10 /* while waiting for rank 0 to create the segment */

/* --- the segment ------------------------------------------------------------------------ */

typedef struct {
  pthread_mutex_t alive; /* robust, process-shared; held by the rank while it is in the family */
  _Atomic uint32_t joined, left;
  _Atomic int32_t pid;
} __attribute__((aligned(64))) member_t;

typedef struct {
  _Atomic uint32_t magic; /* SHM_MAGIC once everything below is initialised */
  uint32_t version, world, nregions;
  uint64_t half, p2p, slot, ctl, region, regions_off, total;
  _Atomic uint32_t abort __attribute__((aligned(64))); /* 0, or cause << 24 | (world rank + 1) */
  _Atomic uint32_t njoined;
  member_t member[];
} hdr_t;

/* One member of a region's group, in group-rank order. */
typedef struct {
  int32_t wrank;            /* its world rank */
  _Atomic uint32_t arrived; /* the barrier generation it last arrived at (for messages) */
  _Atomic uint32_t p2p_seq; /* point-to-point chunks it posted */
  _Atomic uint32_t p2p_ack; /* of those, chunks taken by their receivers */
  _Atomic int32_t p2p_dst[2];
  _Atomic uint64_t p2p_bytes[2];
} __attribute__((aligned(64))) mctl_t;

typedef struct {
  _Atomic uint32_t state; /* 0 free, 1 in use */
  _Atomic uint32_t users; /* members that have not destroyed their handle */
  uint32_t n;
  _Atomic uint32_t count __attribute__((aligned(64))); /* arrivals at the current barrier */
  _Atomic uint32_t gen;                                /* completed barriers */
  _Atomic uint32_t event __attribute__((aligned(64))); /* futex word, bumped on every change */
  _Atomic uint32_t sleepers;
  mctl_t m[];
} ctl_t;

typedef struct {
  size_t half, p2p, slot, ctl, region, regions_off, total;
  int nregions;
} layout_t;

/* Every rank derives the layout from the world size alone and checks that
 * the segment it opened agrees, so no size is taken from the segment. The
 * staging half shrinks with the world to keep a region near 32 MiB; regions
 * beyond the world's are sparse until a split uses them. */
static layout_t layout_for(int world) {
  layout_t L;
  size_t half = ((size_t)8 << 20) / (size_t)world;
  half &= ~(PAGE - 1);
  if (half > ((size_t)1 << 20)) half = (size_t)1 << 20;
  if (half < ((size_t)64 << 10)) half = (size_t)64 << 10;
  L.half = half;
  L.p2p = half;
  L.slot = 2 * L.half + 2 * L.p2p;
  L.ctl = (sizeof(ctl_t) + (size_t)world * sizeof(mctl_t) + PAGE - 1) & ~(PAGE - 1);
  L.region = L.ctl + (size_t)world * L.slot;
  L.regions_off = (sizeof(hdr_t) + (size_t)world * sizeof(member_t) + PAGE - 1) & ~(PAGE - 1);
  L.nregions = 2 * world + 2 < 64 ? 2 * world + 2 : 64;
  L.total = L.regions_off + (size_t)L.nregions * L.region;
  return L;
}

/* --- in-process handles ------------------------------------------------------------------ */

/* A process's mapping of one family, shared by its handles on the family's
 * groups; the last one to go leaves the family. */
typedef struct {
  _Atomic int refs; /* handles on the family's groups in this process */
  int fd;
  unsigned char *base;
  hdr_t *hdr;
  layout_t L;
  int wrank;
} fam_t;

struct aa__shm {
  fam_t *fam;
  int region;
  ctl_t *ctl;
  int rank, n;
  int timeout_ms;
  uint32_t step;              /* staging steps taken: its parity picks the half */
  uint32_t p2p_seq;           /* chunks this member posted */
  const unsigned char **srcs; /* n scratch pointers for reductions */
  unsigned char *slot[];      /* n slot bases */
};

static ctl_t *region_ctl(fam_t *f, int r) {
  return (ctl_t *)(f->base + f->L.regions_off + (size_t)r * f->L.region);
}

/* --- futexes and waiting ------------------------------------------------------------------ */

static void futex_wait(_Atomic uint32_t *w, uint32_t val, double seconds) {
  if (seconds <= 0) return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Publishes a change a waiter of this region may be waiting for. Callers
 * make their change with a seq_cst store first; the sleepers check after the
 * bump pairs with the waiter's increment before it sleeps. */
static void notify(ctl_t *ctl) {
  atomic_fetch_add(&ctl->event, 1);
  if (atomic_load(&ctl->sleepers)) futex_wake_all(&ctl->event);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* Formats "what: rank R of N[ (world rank W)]: message" into the last error. */
static int fail(aa__shm_t *s, int code, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(aa__shm_t *s, int code, const char *what, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (s->region == 0) return aa_error(code, "%s: rank %d of %d: %s", what, s->rank, s->n, msg);
  return aa_error(code, "%s: rank %d of %d (world rank %d): %s", what, s->rank, s->n, s->fam->wrank, msg);
}

/* "rank g" for a member of this group ("rank g (world rank w)" in a
 * sub-group), "world rank w" for a rank outside it. */
static void peer_name(const aa__shm_t *s, int wrank, char *buf, size_t n) {
  if (s->region == 0) {
    snprintf(buf, n, "rank %d", wrank);
    return;
  }
  for (int g = 0; g < s->n; g++)
    if (s->ctl->m[g].wrank == wrank) {
      snprintf(buf, n, "rank %d (world rank %d)", g, wrank);
      return;
    }
  snprintf(buf, n, "world rank %d", wrank);
}

static int cancelled(aa__shm_t *s, const char *what) {
  uint32_t a = atomic_load(&s->fam->hdr->abort);
  char who[64];
  peer_name(s, (int)(a & 0xffffffu) - 1, who, sizeof who);
  switch (a >> 24) {
  case AA__ABORT_CALLED:
    return fail(s, AA_ECANCELLED, what, "the group was aborted by %s (aa_comm_abort)", who);
  case AA__ABORT_DIED: return fail(s, AA_ECANCELLED, what, "the group was aborted: %s died", who);
  case AA__ABORT_TIMEOUT:
    return fail(s, AA_ECANCELLED, what, "the group was aborted: %s timed out waiting for its peers", who);
  default: return fail(s, AA_ECANCELLED, what, "the group was aborted after an error on %s", who);
  }
}

static void wake_family(fam_t *f) {
  for (int r = 0; r < f->L.nregions; r++) {
    ctl_t *ctl = region_ctl(f, r);
    atomic_fetch_add(&ctl->event, 1);
    futex_wake_all(&ctl->event);
  }
}

/* Async-signal-safe: a compare-and-swap (the first cause is kept) and
 * futex wakes; errno is preserved. */
static void abort_family(fam_t *f, int cause, int wrank) {
  int saved = errno;
  uint32_t expected = 0, v = (uint32_t)cause << 24 | (uint32_t)(wrank + 1);
  atomic_compare_exchange_strong(&f->hdr->abort, &expected, v);
  wake_family(f);
  errno = saved;
}

void aa__shm_abort(aa__shm_t *s, int cause) { abort_family(s->fam, cause, s->fam->wrank); }

enum { PEER_ALIVE, PEER_DEAD, PEER_LEFT };

/* The state of world rank w, from its mutex. A successful trylock means the
 * mutex is free: the rank left, or has not joined yet. EOWNERDEAD makes us
 * the owner of a mutex whose holder died; unlocking it without
 * pthread_mutex_consistent leaves it ENOTRECOVERABLE, so every later probe
 * sees the death too and no process keeps it on its robust list. */
static int peer_state(fam_t *f, int w) {
  member_t *m = &f->hdr->member[w];
  if (atomic_load(&m->left)) return PEER_LEFT;
  int r = pthread_mutex_trylock(&m->alive);
  if (r == EBUSY) return PEER_ALIVE;
  if (r == EOWNERDEAD) {
    pthread_mutex_unlock(&m->alive);
    return PEER_DEAD;
  }
  if (r == ENOTRECOVERABLE) return PEER_DEAD;
  if (r == 0) pthread_mutex_unlock(&m->alive);
  return atomic_load(&m->left) ? PEER_LEFT : PEER_ALIVE;
}

/* Probes the other members; a dead (or, outside the join, departed) one
 * aborts the family. */
static int probe(aa__shm_t *s, const char *what, int joining) {
  for (int g = 0; g < s->n; g++) {
    int w = s->ctl->m[g].wrank;
    if (g == s->rank) continue;
    if (joining && !atomic_load(&s->fam->hdr->member[w].joined)) continue;
    int st = peer_state(s->fam, w);
    if (st == PEER_ALIVE || (st == PEER_LEFT && joining)) continue;
    char who[64];
    peer_name(s, w, who, sizeof who);
    if (st == PEER_DEAD) {
      abort_family(s->fam, AA__ABORT_DIED, w);
      /* Report the death we found, whatever cause was recorded first. */
      return fail(s, AA_ECANCELLED, what, "%s (pid %d) died", who,
                  (int)atomic_load(&s->fam->hdr->member[w].pid));
    }
    abort_family(s->fam, AA__ABORT_ERROR, w);
    return fail(s, AA_ECANCELLED, what, "%s left the group (aa_comm_destroy) while its peers waited for it",
                who);
  }
  return 0;
}

int aa__shm_check(aa__shm_t *s, const char *what, int probe_peers) {
  if (atomic_load(&s->fam->hdr->abort)) return cancelled(s, what);
  return probe_peers ? probe(s, what, 0) : 0;
}

int aa__shm_timeout_ms(const aa__shm_t *s) { return s->timeout_ms; }
int aa__shm_rank(const aa__shm_t *s) { return s->rank; }
int aa__shm_world(const aa__shm_t *s) { return s->n; }

/* What a wait waits for. */
enum { W_BARRIER, W_SEND, W_RECV, W_JOIN };
typedef struct {
  int kind;
  uint32_t val; /* W_BARRIER: the generation at arrival; W_SEND: the sequence to post */
  int peer;     /* W_SEND, W_RECV: group rank */
} waitfor_t;

static int ready(const aa__shm_t *s, const waitfor_t *w) {
  const ctl_t *ctl = s->ctl;
  switch (w->kind) {
  case W_BARRIER: return atomic_load(&ctl->gen) != w->val;
  case W_SEND: return w->val - atomic_load(&ctl->m[s->rank].p2p_ack) < 2;
  case W_RECV: {
    const mctl_t *pm = &ctl->m[w->peer];
    uint32_t a = atomic_load(&pm->p2p_ack);
    return atomic_load(&pm->p2p_seq) != a && atomic_load(&pm->p2p_dst[a & 1]) == s->rank;
  }
  default: return atomic_load(&s->fam->hdr->njoined) == (uint32_t)s->n;
  }
}

/* The members a timed-out wait was waiting for, as "rank 2, rank 3". */
static void missing(const aa__shm_t *s, const waitfor_t *w, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int g = 0; g < s->n && len + 64 < n; g++) {
    int absent;
    if (w->kind == W_BARRIER)
      absent = g != s->rank && atomic_load(&s->ctl->m[g].arrived) != w->val + 1;
    else if (w->kind == W_JOIN)
      absent = !atomic_load(&s->fam->hdr->member[s->ctl->m[g].wrank].joined);
    else
      absent = g == w->peer;
    if (!absent) continue;
    char who[64];
    peer_name(s, s->ctl->m[g].wrank, who, sizeof who);
    len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", who);
  }
}

/* Sleeps until w holds. Fails with AA_ECANCELLED once the family is
 * aborted or a member is found dead, and with AA_ETIMEOUT when w has not
 * held for the group's timeout; a timeout in a collective aborts the family
 * (the group cannot be resynchronised), one while joining does not. */
static int wait_for(aa__shm_t *s, const waitfor_t *w, const char *what) {
  ctl_t *ctl = s->ctl;
  hdr_t *h = s->fam->hdr;
  double t0 = aa_now();
  while (aa_now() - t0 < SPIN_NS * 1e-9) {
    if (ready(s, w)) return 0;
    sched_yield();
  }
  double deadline = t0 + s->timeout_ms * 1e-3, next_probe = t0 + PROBE_MS * 1e-3;
  for (;;) {
    uint32_t ev = atomic_load(&ctl->event);
    if (ready(s, w)) return 0;
    if (atomic_load(&h->abort)) return cancelled(s, what);
    double t = aa_now();
    if (t >= next_probe) {
      int rc = probe(s, what, w->kind == W_JOIN);
      if (rc) return rc;
      next_probe = t + PROBE_MS * 1e-3;
    }
    if (t >= deadline) {
      char who[512];
      missing(s, w, who, sizeof who);
      if (w->kind == W_JOIN)
        return fail(s, AA_ETIMEOUT, what, "timed out after %d ms: %s did not join", s->timeout_ms, who);
      aa__shm_abort(s, AA__ABORT_TIMEOUT);
      if (w->kind == W_SEND)
        return fail(s, AA_ETIMEOUT, what, "timed out after %d ms: %s did not receive", s->timeout_ms, who);
      if (w->kind == W_RECV)
        return fail(s, AA_ETIMEOUT, what, "timed out after %d ms: %s did not send", s->timeout_ms, who);
      return fail(s, AA_ETIMEOUT, what, "timed out after %d ms waiting for %s", s->timeout_ms, who);
    }
    double until = next_probe < deadline ? next_probe : deadline;
    atomic_fetch_add(&ctl->sleepers, 1);
    futex_wait(&ctl->event, ev, until - t);
    atomic_fetch_sub(&ctl->sleepers, 1);
  }
}

/* Generation barrier: the last to arrive resets the count and bumps the
 * generation. The generation is read before arriving, so it cannot move
 * past the value read until this member has arrived. */
static int barrier(aa__shm_t *s, const char *what) {
  ctl_t *ctl = s->ctl;
  uint32_t g = atomic_load(&ctl->gen);
  atomic_store(&ctl->m[s->rank].arrived, g + 1);
  if (atomic_fetch_add(&ctl->count, 1) == (uint32_t)s->n - 1) {
    atomic_store(&ctl->count, 0);
    atomic_store(&ctl->gen, g + 1);
    notify(ctl);
    return 0;
  }
  waitfor_t w = {W_BARRIER, g, -1};
  return wait_for(s, &w, what);
}

int aa__shm_barrier(aa__shm_t *s, const char *what) { return barrier(s, what); }

/* --- joining ------------------------------------------------------------------------------- */

/* The view of region r of family f as group rank `rank`. */
static aa__shm_t *view_new(fam_t *f, int r, int rank, int timeout_ms) {
  ctl_t *ctl = region_ctl(f, r);
  int n = (int)ctl->n;
  aa__shm_t *s = calloc(1, sizeof *s + (size_t)n * sizeof(unsigned char *));
  if (!s) return NULL;
  s->srcs = calloc((size_t)n, sizeof *s->srcs);
  if (!s->srcs) {
    free(s);
    return NULL;
  }
  s->fam = f;
  s->region = r;
  s->ctl = ctl;
  s->rank = rank;
  s->n = n;
  s->timeout_ms = timeout_ms;
  unsigned char *slots = (unsigned char *)ctl + f->L.ctl;
  for (int g = 0; g < n; g++)
    s->slot[g] = slots + (size_t)g * f->L.slot;
  atomic_fetch_add(&f->refs, 1);
  return s;
}

/* Drops one handle's reference; the last leaves the family: the left flag
 * first (so a prober never mistakes the free mutex for a rank not yet
 * joined), then the mutex, then the mapping. */
static void fam_release(fam_t *f, int joined) {
  if (atomic_fetch_sub(&f->refs, 1) > 1) return;
  if (joined) {
    member_t *m = &f->hdr->member[f->wrank];
    atomic_store(&m->left, 1);
    pthread_mutex_unlock(&m->alive);
  }
  munmap(f->base, f->L.total);
  close(f->fd);
  free(f);
}

static void init_segment(unsigned char *base, const layout_t *L, int world) {
  hdr_t *h = (hdr_t *)base;
  h->version = SHM_VERSION;
  h->world = (uint32_t)world;
  h->nregions = (uint32_t)L->nregions;
  h->half = L->half;
  h->p2p = L->p2p;
  h->slot = L->slot;
  h->ctl = L->ctl;
  h->region = L->region;
  h->regions_off = L->regions_off;
  h->total = L->total;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int r = 0; r < world; r++)
    pthread_mutex_init(&h->member[r].alive, &a);
  pthread_mutexattr_destroy(&a);
  ctl_t *ctl = (ctl_t *)(base + L->regions_off);
  ctl->n = (uint32_t)world;
  for (int r = 0; r < world; r++)
    ctl->m[r].wrank = r;
  atomic_store(&ctl->users, (uint32_t)world);
  atomic_store(&ctl->state, 1);
  atomic_store(&h->magic, SHM_MAGIC);
}

/* A rank other than 0: opens the segment once rank 0 has created it, waits
 * until it is initialised, checks that it was made for the same world, and
 * maps it. */
static int open_segment(const char *name, int rank, int world, const layout_t *L, double deadline,
                        int timeout_ms, int *out_fd, unsigned char **out_base) {
  int fd;
  while ((fd = shm_open(name, O_RDWR, 0)) < 0) {
    if (errno != ENOENT)
      return aa_error(AA_EIO, "aa_comm_init: rank %d of %d: opening the segment %s: %s", rank, world, name,
                      strerror(errno));
    if (aa_now() >= deadline)
      return aa_error(
          AA_ETIMEOUT,
          "aa_comm_init: rank %d of %d: timed out after %d ms: rank 0 did not create the segment %s", rank,
          world, timeout_ms, name);
    sleep_ms(OPEN_RETRY_MS);
  }
  hdr_t *h = MAP_FAILED;
  int rc = 0;
  for (;;) {
    struct stat st;
    if (fstat(fd, &st)) {
      rc = aa_error(AA_EIO, "aa_comm_init: rank %d of %d: fstat %s: %s", rank, world, name, strerror(errno));
      break;
    }
    if (h == MAP_FAILED && (size_t)st.st_size >= PAGE) {
      h = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
      if (h == MAP_FAILED) {
        rc = aa_error(AA_EIO, "aa_comm_init: rank %d of %d: mmap %s: %s", rank, world, name, strerror(errno));
        break;
      }
    }
    if (h != MAP_FAILED && atomic_load(&h->magic) == SHM_MAGIC) {
      if (h->version != SHM_VERSION || h->world != (uint32_t)world || h->total != L->total ||
          h->half != L->half || h->regions_off != L->regions_off || (size_t)st.st_size != L->total)
        rc = aa_error(
            AA_EINVAL,
            "aa_comm_init: rank %d of %d: the segment %s was made for a group of %u ranks (version %u), "
            "not %d",
            rank, world, name, h->world, h->version, world);
      break;
    }
    if (aa_now() >= deadline) {
      rc = aa_error(AA_ETIMEOUT,
                    "aa_comm_init: rank %d of %d: timed out after %d ms: rank 0 did not finish "
                    "creating the segment %s",
                    rank, world, timeout_ms, name);
      break;
    }
    sleep_ms(1);
  }
  if (h != MAP_FAILED) munmap(h, PAGE);
  unsigned char *base = MAP_FAILED;
  if (!rc) {
    base = mmap(NULL, L->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
      rc = aa_error(AA_EIO, "aa_comm_init: rank %d of %d: mmap %s (%zu bytes): %s", rank, world, name,
                    L->total, strerror(errno));
  }
  if (rc) {
    close(fd);
    return rc;
  }
  *out_fd = fd;
  *out_base = base;
  return 0;
}

/* Rank 0: creates, sizes (with the world region allocated, so a full
 * /dev/shm is an error here rather than a SIGBUS later), maps and
 * initialises the segment. */
static int create_segment(const char *name, int world, const layout_t *L, int *out_fd,
                          unsigned char **out_base) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return aa_error(errno == EEXIST ? AA_EINVAL : AA_EIO,
                    "aa_comm_init: rank 0 of %d: creating the segment %s: %s", world, name, strerror(errno));
  int rc = 0, e;
  unsigned char *base = MAP_FAILED;
  if (ftruncate(fd, (off_t)L->total))
    rc = aa_error(AA_EIO, "aa_comm_init: rank 0 of %d: sizing %s to %zu bytes: %s", world, name, L->total,
                  strerror(errno));
  else if ((e = posix_fallocate(fd, 0, (off_t)(L->regions_off + L->region))) != 0)
    rc = aa_error(e == ENOSPC ? AA_ENOMEM : AA_EIO,
                  "aa_comm_init: rank 0 of %d: allocating %zu bytes of %s in /dev/shm: %s", world,
                  L->regions_off + L->region, name, strerror(e));
  else if ((base = mmap(NULL, L->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    rc = aa_error(AA_EIO, "aa_comm_init: rank 0 of %d: mmap %s: %s", world, name, strerror(errno));
  if (rc) {
    close(fd);
    shm_unlink(name);
    return rc;
  }
  init_segment(base, L, world);
  *out_fd = fd;
  *out_base = base;
  return 0;
}

int aa__shm_init(aa__shm_t **out, const char *name, int rank, int world, int timeout_ms) {
  if (world > MAX_WORLD)
    return aa_error(AA_EINVAL, "aa_comm_init: a shm group has at most %d ranks, not %d", MAX_WORLD, world);
  layout_t L = layout_for(world);
  double deadline = aa_now() + timeout_ms * 1e-3;
  int fd = -1;
  unsigned char *base = NULL;
  int rc = rank == 0 ? create_segment(name, world, &L, &fd, &base)
                     : open_segment(name, rank, world, &L, deadline, timeout_ms, &fd, &base);
  if (rc) return rc;

  fam_t *f = calloc(1, sizeof *f);
  if (!f) {
    munmap(base, L.total);
    close(fd);
    shm_unlink(name);
    return aa_error(AA_ENOMEM, "aa_comm_init: out of memory");
  }
  f->fd = fd;
  f->base = base;
  f->hdr = (hdr_t *)base;
  f->L = L;
  f->wrank = rank;
  member_t *me = &f->hdr->member[rank];
  int r = pthread_mutex_trylock(&me->alive);
  if (r) {
    if (r == EOWNERDEAD) pthread_mutex_unlock(&me->alive);
    rc = aa_error(AA_EINVAL, "aa_comm_init: rank %d of %d: %s", rank, world,
                  r == EBUSY ? "another process already joined the group as this rank"
                             : "an earlier process that joined the group as this rank died");
    munmap(base, L.total);
    close(fd);
    free(f);
    shm_unlink(name);
    return rc;
  }
  atomic_store(&me->pid, (int32_t)getpid());
  atomic_store(&me->joined, 1);
  atomic_fetch_add(&f->hdr->njoined, 1);
  notify(region_ctl(f, 0));

  aa__shm_t *s = view_new(f, 0, rank, timeout_ms);
  if (!s) {
    atomic_store(&f->refs, 1);
    fam_release(f, 1);
    shm_unlink(name);
    return aa_error(AA_ENOMEM, "aa_comm_init: out of memory");
  }
  waitfor_t w = {W_JOIN, 0, -1};
  rc = wait_for(s, &w, "aa_comm_init");
  /* Once everyone has mapped it the name has served; on failure it must not
   * outlive the attempt. Every rank unlinks, so a rank killed right after
   * joining cannot leave it behind. */
  shm_unlink(name);
  if (rc) {
    aa__shm_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* --- collectives --------------------------------------------------------------------------- */

static unsigned char *half_of(const aa__shm_t *s, int g, uint32_t step) {
  return s->slot[g] + (step & 1u) * s->fam->L.half;
}

/* Per step: copy the chunk into the own half; barrier; reduce the own
 * slice of the chunk from every half (in rank order) into the own half;
 * barrier; copy every member's reduced slice out. */
int aa__shm_all_reduce(aa__shm_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                       aa_comm_op_t op) {
  size_t e = aa_dtype_size(dt), chunk = s->fam->L.half / e;
  const unsigned char *in = send;
  unsigned char *out = recv;
  for (size_t off = 0; off < count; off += chunk) {
    size_t c = count - off < chunk ? count - off : chunk;
    uint32_t step = s->step++;
    unsigned char *mine = half_of(s, s->rank, step);
    memcpy(mine, in + off * e, c * e);
    int rc = barrier(s, "all_reduce");
    if (rc) return rc;
    size_t lo, hi;
    aa__comm_slice(c, s->n, s->rank, &lo, &hi);
    if (hi > lo) {
      for (int k = 0; k < s->n; k++)
        s->srcs[k] = half_of(s, k, step) + lo * e;
      aa__comm_reduce(mine + lo * e, s->srcs, s->n, hi - lo, dt, op);
    }
    if ((rc = barrier(s, "all_reduce"))) return rc;
    for (int k = 0; k < s->n; k++) {
      aa__comm_slice(c, s->n, k, &lo, &hi);
      if (hi > lo) memcpy(out + (off + lo) * e, half_of(s, k, step) + lo * e, (hi - lo) * e);
    }
  }
  return 0;
}

/* Per step (a chunk of every member's output): copy the chunk destined to
 * each member into the own half, in member order; barrier; reduce the own
 * part of every half straight into recv. The next step's barrier is what
 * keeps a half from being rewritten while it is read. */
int aa__shm_reduce_scatter(aa__shm_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                           aa_comm_op_t op) {
  size_t e = aa_dtype_size(dt), chunk = s->fam->L.half / (e * (size_t)s->n);
  const unsigned char *in = send;
  unsigned char *out = recv;
  for (size_t off = 0; off < count; off += chunk) {
    size_t c = count - off < chunk ? count - off : chunk;
    uint32_t step = s->step++;
    unsigned char *mine = half_of(s, s->rank, step);
    for (int j = 0; j < s->n; j++)
      memcpy(mine + (size_t)j * c * e, in + ((size_t)j * count + off) * e, c * e);
    int rc = barrier(s, "reduce_scatter");
    if (rc) return rc;
    for (int k = 0; k < s->n; k++)
      s->srcs[k] = half_of(s, k, step) + (size_t)s->rank * c * e;
    aa__comm_reduce(out + off * e, s->srcs, s->n, c, dt, op);
  }
  return 0;
}

int aa__shm_all_gather(aa__shm_t *s, const void *send, void *recv, size_t bytes, const char *what) {
  size_t chunk = s->fam->L.half;
  const unsigned char *in = send;
  unsigned char *out = recv;
  for (size_t off = 0; off < bytes; off += chunk) {
    size_t c = bytes - off < chunk ? bytes - off : chunk;
    uint32_t step = s->step++;
    memcpy(half_of(s, s->rank, step), in + off, c);
    int rc = barrier(s, what);
    if (rc) return rc;
    for (int k = 0; k < s->n; k++) {
      unsigned char *dst = out + (size_t)k * bytes + off;
      if (k != s->rank)
        memcpy(dst, half_of(s, k, step), c);
      else if (dst != in + off) /* in place: send is already recv's own slice */
        memcpy(dst, in + off, c);
    }
  }
  return 0;
}

int aa__shm_broadcast(aa__shm_t *s, const void *send, void *recv, size_t bytes, int root, const char *what) {
  size_t chunk = s->fam->L.half;
  const unsigned char *in = send;
  unsigned char *out = recv;
  for (size_t off = 0; off < bytes; off += chunk) {
    size_t c = bytes - off < chunk ? bytes - off : chunk;
    uint32_t step = s->step++;
    if (s->rank == root) memcpy(half_of(s, root, step), in + off, c);
    int rc = barrier(s, what);
    if (rc) return rc;
    if (s->rank != root)
      memcpy(out + off, half_of(s, root, step), c);
    else if (out != in)
      memcpy(out + off, in + off, c);
  }
  return 0;
}

/* all_to_all_v in steps of one barrier each. A member's half is a header of
 * n byte counts (what it sends to each member; written in step 0 only)
 * then n parts of `per` bytes, part j holding the step's piece of its
 * message to member j. After step 0's barrier every member reads every
 * header: it checks what each peer sends it against its own recv count
 * (a mismatch fails the family, as recv's does) and derives the number of
 * steps from the largest message, so every member takes the same steps
 * (at least one: the headers must cross even when nothing else does). The
 * own part is copied straight from send to recv. */
int aa__shm_all_to_all_v(aa__shm_t *s, const void *send, const size_t *send_counts,
                         const size_t *send_offsets, void *recv, const size_t *recv_counts,
                         const size_t *recv_offsets, size_t esize, const char *what) {
  int n = s->n, me = s->rank;
  size_t hdr = ((size_t)n * sizeof(uint64_t) + 63) & ~(size_t)63;
  size_t per = ((s->fam->L.half - hdr) / (size_t)n) & ~(size_t)63;
  const unsigned char *in = send;
  unsigned char *out = recv;
  size_t steps = 1;
  for (size_t k = 0; k < steps; k++) {
    uint32_t step = s->step++;
    unsigned char *mine = half_of(s, me, step);
    size_t done = k * per;
    for (int j = 0; j < n; j++) {
      size_t b = send_counts[j] * esize;
      if (k == 0) ((uint64_t *)mine)[j] = (uint64_t)b;
      if (j != me && b > done)
        memcpy(mine + hdr + (size_t)j * per, in + send_offsets[j] * esize + done,
               b - done < per ? b - done : per);
    }
    int rc = barrier(s, what);
    if (rc) return rc;
    if (k == 0) {
      uint64_t most = 0;
      for (int i = 0; i < n; i++) {
        const uint64_t *h = (const uint64_t *)half_of(s, i, step);
        for (int j = 0; j < n; j++)
          if (j != i && h[j] > most) most = h[j];
        if (i != me && h[me] != (uint64_t)(recv_counts[i] * esize)) {
          aa__shm_abort(s, AA__ABORT_ERROR);
          return fail(
              s, AA_EINVAL, what,
              "rank %d sends %llu bytes to this rank, but recv_counts[%d] = %zu elements of %zu bytes "
              "(the ranks' counts or dtypes disagree)",
              i, (unsigned long long)h[me], i, recv_counts[i], esize);
        }
      }
      steps = most ? (size_t)((most + per - 1) / per) : 1;
    }
    for (int i = 0; i < n; i++) {
      size_t b = recv_counts[i] * esize;
      if (i != me && b > done)
        memcpy(out + recv_offsets[i] * esize + done, half_of(s, i, step) + hdr + (size_t)me * per,
               b - done < per ? b - done : per);
    }
  }
  if (send_counts[me])
    memcpy(out + recv_offsets[me] * esize, in + send_offsets[me] * esize, send_counts[me] * esize);
  return 0;
}

/* Point to point: the sender's two entries form a queue of chunks, each
 * tagged with its receiver. The sender posts a chunk when an entry is free
 * (at most two ahead of its receivers); a receiver takes the oldest chunk
 * when it is addressed to it, so chunks to different receivers stay in the
 * order they were sent. */
int aa__shm_send(aa__shm_t *s, const void *buf, size_t bytes, int peer) {
  mctl_t *mc = &s->ctl->m[s->rank];
  size_t chunk = s->fam->L.p2p;
  const unsigned char *in = buf;
  for (size_t off = 0; off < bytes; off += chunk) {
    size_t c = bytes - off < chunk ? bytes - off : chunk;
    uint32_t seq = s->p2p_seq;
    waitfor_t w = {W_SEND, seq, peer};
    int rc = wait_for(s, &w, "send");
    if (rc) return rc;
    uint32_t e = seq & 1u;
    memcpy(s->slot[s->rank] + 2 * s->fam->L.half + e * chunk, in + off, c);
    atomic_store(&mc->p2p_dst[e], peer);
    atomic_store(&mc->p2p_bytes[e], (uint64_t)c);
    atomic_store(&mc->p2p_seq, seq + 1);
    s->p2p_seq = seq + 1;
    notify(s->ctl);
  }
  return 0;
}

int aa__shm_recv(aa__shm_t *s, void *buf, size_t bytes, int peer) {
  mctl_t *pm = &s->ctl->m[peer];
  size_t chunk = s->fam->L.p2p;
  unsigned char *out = buf;
  for (size_t off = 0; off < bytes; off += chunk) {
    size_t c = bytes - off < chunk ? bytes - off : chunk;
    waitfor_t w = {W_RECV, 0, peer};
    int rc = wait_for(s, &w, "recv");
    if (rc) return rc;
    uint32_t a = atomic_load(&pm->p2p_ack), e = a & 1u;
    uint64_t got = atomic_load(&pm->p2p_bytes[e]);
    if (got != c) {
      aa__shm_abort(s, AA__ABORT_ERROR);
      return fail(s, AA_EINVAL, "recv",
                  "rank %d sent a chunk of %llu bytes where %zu were expected (send and recv "
                  "differ in count or dtype)",
                  peer, (unsigned long long)got, c);
    }
    memcpy(out + off, s->slot[peer] + 2 * s->fam->L.half + e * chunk, c);
    atomic_store(&pm->p2p_ack, a + 1);
    notify(s->ctl);
  }
  return 0;
}

/* --- split and destroy ----------------------------------------------------------------------- */

/* Claims a free region for a group of the given world ranks and initialises
 * its control block; -1 if none is free, -2 if /dev/shm has no room for it. */
static int region_alloc(fam_t *f, const int *wranks, int n) {
  for (int r = 1; r < f->L.nregions; r++) {
    ctl_t *ctl = region_ctl(f, r);
    uint32_t expected = 0;
    if (!atomic_compare_exchange_strong(&ctl->state, &expected, 1)) continue;
    off_t at = (off_t)(f->L.regions_off + (size_t)r * f->L.region);
    if (posix_fallocate(f->fd, at, (off_t)(f->L.ctl + (size_t)n * f->L.slot))) {
      atomic_store(&ctl->state, 0);
      return -2;
    }
    ctl->n = (uint32_t)n;
    atomic_store(&ctl->count, 0);
    atomic_store(&ctl->gen, 0);
    for (int g = 0; g < n; g++) {
      mctl_t *m = &ctl->m[g];
      m->wrank = wranks[g];
      atomic_store(&m->arrived, 0);
      atomic_store(&m->p2p_seq, 0);
      atomic_store(&m->p2p_ack, 0);
    }
    atomic_store(&ctl->users, (uint32_t)n);
    return r;
  }
  return -1;
}

/* Over the parent: all-gather every member's (color, key); each group's
 * first member claims and initialises a region; all-gather the regions;
 * every member takes its group's. */
int aa__shm_split(aa__shm_t *p, int color, int key, aa__shm_t **out) {
  int n = p->n, rc;
  int32_t mine[2] = {color, key};
  int32_t *ck = malloc((size_t)n * 2 * sizeof *ck);
  int32_t *regs = malloc((size_t)n * sizeof *regs);
  int *order = malloc((size_t)n * sizeof *order), *wr = malloc((size_t)n * sizeof *wr);
  if (!ck || !regs || !order || !wr) {
    rc = aa_error(AA_ENOMEM, "aa_comm_split: out of memory");
    goto cleanup;
  }
  if ((rc = aa__shm_all_gather(p, mine, ck, sizeof mine, "aa_comm_split"))) goto cleanup;
  /* Members of my color ordered by (key, parent rank): insertion sort. */
  int m = 0, me = -1;
  for (int g = 0; g < n && color >= 0; g++) {
    if (ck[2 * g] != color) continue;
    int at = m++;
    while (at > 0 && ck[2 * order[at - 1] + 1] > ck[2 * g + 1]) {
      order[at] = order[at - 1];
      at--;
    }
    order[at] = g;
  }
  for (int i = 0; i < m; i++) {
    if (order[i] == p->rank) me = i;
    wr[i] = p->ctl->m[order[i]].wrank;
  }
  int32_t reg = -3; /* not a group's first member */
  if (me == 0) reg = region_alloc(p->fam, wr, m);
  if ((rc = aa__shm_all_gather(p, &reg, regs, sizeof reg, "aa_comm_split"))) goto cleanup;
  if (color < 0) {
    *out = NULL;
    goto cleanup;
  }
  reg = regs[order[0]];
  if (reg < 0) {
    rc = fail(p, reg == -1 ? AA_EUNSUPPORTED : AA_ENOMEM, "aa_comm_split",
              reg == -1 ? "the family already has %d groups, the most its segment holds"
                        : "no room in /dev/shm for another group of %d",
              reg == -1 ? p->fam->L.nregions : m);
    goto cleanup;
  }
  aa__shm_t *s = view_new(p->fam, reg, me, p->timeout_ms);
  if (!s) {
    rc = aa_error(AA_ENOMEM, "aa_comm_split: out of memory");
    goto cleanup;
  }
  *out = s;
cleanup:
  free(ck);
  free(regs);
  free(order);
  free(wr);
  return rc;
}

void aa__shm_destroy(aa__shm_t *s) {
  if (!s) return;
  ctl_t *ctl = s->ctl;
  if (atomic_fetch_sub(&ctl->users, 1) == 1 && s->region != 0) atomic_store(&ctl->state, 0);
  fam_release(s->fam, 1);
  free(s->srcs);
  free(s);
}
