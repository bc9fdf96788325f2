/* The C++ shim over libgloo (comm_internal.h, aa__gx_*): the only C++ of
 * the project. Everything above the byte transfers (the collectives, the
 * rank order of sums, sub-groups, messages) is C, in comm_gloo.c.
 *
 * A context is one gloo::rendezvous::Context over the TCP transport,
 * connected in a full mesh through the caller's aa_comm_store_t (a Store
 * subclass calling its callbacks, wrapped in a PrefixStore on the
 * rendezvous name). An exchange posts sends and receives on UnboundBuffers
 * (the caller's memory, no copies) and waits for each.
 *
 * Abort: UnboundBuffer::abortWait* takes a mutex, so a signal handler
 * cannot call it. aa__gx_abort only sets a flag and writes a byte to a
 * pipe; a watcher thread blocked on the pipe then interrupts the waits of
 * the exchange in progress and closes the connections, so the peers
 * waiting on this rank see their sockets close and fail too. The mutex mu
 * orders the watcher against an exchange posting its transfers: nothing is
 * posted on connections the watcher closed.
 *
 * No exception leaves this file: each extern "C" function catches
 * everything and answers an AA_E* code with gloo's words in err->why. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

extern "C" {
#include "comm_internal.h"
}

namespace {

/* What a store callback answered, carried through gloo's rendezvous code. */
struct StoreError : std::exception {
  int code;
  std::string key, msg;
  StoreError(int c, const std::string &k) : code(c), key(k), msg(aa_last_error()) {}
  const char *what() const noexcept override { return msg.c_str(); }
};

/* gloo's Store over the caller's callbacks; every get waits up to the join
 * timeout (connectFullMesh calls get without waiting first). */
class CStore : public gloo::rendezvous::Store {
public:
  CStore(const aa_comm_store_t *s, int timeout_ms) : s_(s), timeout_ms_(timeout_ms) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    int rc = s_->set(s_->ctx, key.c_str(), data.data(), data.size());
    if (rc) throw StoreError(rc, key);
  }
  std::vector<char> get(const std::string &key) override {
    void *v = nullptr;
    size_t len = 0;
    int rc = s_->get(s_->ctx, key.c_str(), timeout_ms_, &v, &len);
    if (rc) throw StoreError(rc, key);
    std::vector<char> out((char *)v, (char *)v + len);
    free(v);
    return out;
  }
  void wait(const std::vector<std::string> &keys) override {
    for (const auto &k : keys)
      get(k);
  }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override { wait(keys); }

private:
  const aa_comm_store_t *s_;
  int timeout_ms_;
};

/* The world rank a rendezvous key belongs to: gloo's keys end in "rank_<i>"
 * (the host name) or "<i>" (the addresses). */
int key_rank(const std::string &key) {
  size_t at = key.rfind('/');
  std::string tail = at == std::string::npos ? key : key.substr(at + 1);
  if (tail.rfind("rank_", 0) == 0) tail = tail.substr(5);
  if (tail.empty() || tail.size() > 9 || tail.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(tail);
}

void put_why(aa__gx_err_t *err, const char *text) { snprintf(err->why, sizeof err->why, "%s", text); }

/* SIGPIPE would kill the process when gloo writes to the socket of a peer
 * that died (it uses writev, without MSG_NOSIGNAL): ignore it unless the
 * process installed a handler of its own. */
void ignore_sigpipe() {
  struct sigaction sa;
  if (sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL) {
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, nullptr);
  }
}

} // namespace

struct aa__gx {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::mutex mu;                                      /* guards live and closed against the watcher */
  std::vector<gloo::transport::UnboundBuffer *> live; /* the exchange in progress */
  bool closed = false;                                /* the connections were closed */
  std::atomic<int> aborted{0};
  int pipe_fd[2] = {-1, -1};
  std::thread watcher;

  ~aa__gx() {
    for (int fd : pipe_fd)
      if (fd >= 0) close(fd);
  }

  /* Closes every connection once; mu is held. */
  void close_locked() {
    if (closed) return;
    closed = true;
    try {
      ctx->closeConnections();
    } catch (...) {
    }
  }

  /* Waits on the pipe: a byte 'a' is an abort, end of file the end. */
  void watch() {
    for (;;) {
      char c;
      ssize_t r = read(pipe_fd[0], &c, 1);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || c != 'a') return;
      std::lock_guard<std::mutex> lock(mu);
      for (auto *b : live) {
        b->abortWaitRecv();
        b->abortWaitSend();
      }
      close_locked();
    }
  }
};

extern "C" int aa__gx_connect(aa__gx_t **out, const aa_comm_store_t *store, const char *prefix,
                              const char *address, int rank, int world, int timeout_ms, aa__gx_err_t *err) {
  err->op = -1;
  err->rank = -1;
  err->why[0] = 0;
  std::unique_ptr<aa__gx_t> g;
  try {
    g.reset(new aa__gx_t);
    ignore_sigpipe();
    gloo::transport::tcp::attr attr(address);
    /* gloo's socket thread inherits SCHED_BATCH: its epoll is level
     * triggered and it skips a pair whose lock the caller holds, so when
     * its wake preempted a caller posting a transfer it spun for a whole
     * time slice (a 4 ms stall in one small call of ten or more on 2
     * cores; every call when both threads share a core). A batch thread's
     * wake preempts no one; it runs as soon as the caller waits. */
    int policy;
    struct sched_param sp;
    pthread_getschedparam(pthread_self(), &policy, &sp);
    struct sched_param batch = {0};
    int set = policy == SCHED_OTHER && !pthread_setschedparam(pthread_self(), SCHED_BATCH, &batch);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    if (set) pthread_setschedparam(pthread_self(), policy, &sp);
    g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
    g->ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
    CStore cs(store, timeout_ms);
    gloo::rendezvous::PrefixStore ps(prefix, cs);
    g->ctx->connectFullMesh(ps, dev);
    if (pipe2(g->pipe_fd, O_CLOEXEC)) {
      put_why(err, strerror(errno));
      return AA_EIO;
    }
    fcntl(g->pipe_fd[1], F_SETFL, O_NONBLOCK);
    aa__gx_t *p = g.get();
    g->watcher = std::thread([p] { p->watch(); });
  } catch (const StoreError &e) {
    err->rank = key_rank(e.key);
    put_why(err, e.msg.c_str());
    return e.code;
  } catch (const gloo::IoException &e) {
    put_why(err, e.what());
    return strstr(e.what(), "imed out") || strstr(e.what(), "imeout") ? AA_ETIMEOUT : AA_ECONN;
  } catch (const gloo::EnforceNotMet &e) {
    put_why(err, e.what());
    return AA_EINVAL;
  } catch (const std::bad_alloc &) {
    put_why(err, "out of memory");
    return AA_ENOMEM;
  } catch (const std::exception &e) {
    put_why(err, e.what());
    return AA_ECONN;
  } catch (...) {
    put_why(err, "an unknown C++ exception");
    return AA_EINTERNAL;
  }
  *out = g.release();
  return 0;
}

extern "C" int aa__gx_exchange(aa__gx_t *g, const aa__gx_op_t *ops, int n, int timeout_ms,
                               aa__gx_err_t *err) {
  err->op = -1;
  err->rank = -1;
  err->why[0] = 0;
  int rc = 0, at = -1;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
  try {
    bufs.reserve((size_t)n);
    {
      std::lock_guard<std::mutex> lock(g->mu);
      if (g->closed || g->aborted.load()) {
        put_why(err, "this rank's connections were closed");
        return AA_ECANCELLED;
      }
      for (int i = 0; i < n; i++) {
        at = i;
        bufs.push_back(g->ctx->createUnboundBuffer(ops[i].ptr, ops[i].bytes));
        g->live.push_back(bufs.back().get());
        if (ops[i].is_send)
          bufs.back()->send(ops[i].peer, ops[i].slot);
        else
          bufs.back()->recv(ops[i].peer, ops[i].slot);
      }
    }
    auto ms = std::chrono::milliseconds(timeout_ms);
    for (int i = 0; i < n; i++) {
      at = i;
      bool done = ops[i].is_send ? bufs[i]->waitSend(ms) : bufs[i]->waitRecv(ms);
      if (!done) {
        put_why(err, "aborted (aa_comm_abort)");
        rc = AA_ECANCELLED;
        break;
      }
    }
  } catch (const gloo::IoException &e) {
    put_why(err, e.what());
    rc = strstr(e.what(), "Timed out waiting") ? AA_ETIMEOUT : AA_ECANCELLED;
  } catch (const std::bad_alloc &) {
    put_why(err, "out of memory");
    rc = AA_ENOMEM;
  } catch (const std::exception &e) {
    put_why(err, e.what());
    rc = AA_ECANCELLED;
  } catch (...) {
    put_why(err, "an unknown C++ exception");
    rc = AA_EINTERNAL;
  }
  /* The buffers go only after the watcher can no longer reach them; their
   * destructors wait until gloo's thread holds no reference to them. */
  std::lock_guard<std::mutex> lock(g->mu);
  g->live.clear();
  if (rc) {
    err->op = at;
    g->close_locked();
  }
  try {
    bufs.clear();
  } catch (...) {
  }
  return rc;
}

extern "C" void aa__gx_abort(aa__gx_t *g) {
  int saved = errno;
  if (!g->aborted.exchange(1)) {
    ssize_t w = write(g->pipe_fd[1], "a", 1);
    (void)w;
  }
  errno = saved;
}

extern "C" void aa__gx_free(aa__gx_t *g) {
  if (!g) return;
  try {
    if (g->pipe_fd[1] >= 0) close(g->pipe_fd[1]); /* the watcher reads end of file */
    g->pipe_fd[1] = -1;
    if (g->watcher.joinable()) g->watcher.join();
    {
      std::lock_guard<std::mutex> lock(g->mu);
      g->close_locked();
    }
    delete g;
  } catch (...) {
  }
}
