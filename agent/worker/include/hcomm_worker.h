/*
 * hcomm_worker.h — the C ABI of hcomm's worker library (libhcomm_worker.so, built by
 * `cargo build -p hcomm-worker`). Checked in; keep in step with agent/worker/src/ffi.rs.
 *
 * An inference engine links it to talk to its node agent over the Pod's local socket
 * (/run/hcomm/agent.sock in the container): learn the member's assignment, build each
 * epoch's communicator beside the serving one, switch at a safe point it chooses, report
 * load and drain progress, and drain on SIGTERM.
 *
 * Every call returns 0 or an error code below; hcomm_worker_last_error() gives the
 * message (per thread, valid until the next call on that thread). Calls block the calling
 * thread; every wait is bounded. No call panics across the boundary.
 */
#ifndef HCOMM_WORKER_H
#define HCOMM_WORKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    HCOMM_WORKER_OK = 0,
    HCOMM_WORKER_E_INVALID = 1,      /* bad argument */
    HCOMM_WORKER_E_AGENT = 2,        /* agent socket unreachable, closed, or off-protocol */
    HCOMM_WORKER_E_REFUSED = 3,      /* the agent answered ok:false (e.g. not verified yet) */
    HCOMM_WORKER_E_TIMEOUT = 4,      /* no answer / no placement within the deadline */
    HCOMM_WORKER_E_COMM = 5,         /* the TCP communicator failed (init, collective) */
    HCOMM_WORKER_E_HCCL = 6,         /* the HCCL backend failed (runtime missing, init, switch) */
    HCOMM_WORKER_E_EPOCH = 7,        /* stale epoch, nothing prepared, nothing serving */
    HCOMM_WORKER_E_BUFFER = 8,       /* buffer too small: *needed says how large */
    HCOMM_WORKER_E_PANIC = 99        /* a bug in the library; the message says where */
};

/* Opaque handle: one per engine process. */
typedef struct HcommWorker hcomm_worker;

/* The last error's message on this thread ("" after a success). */
const char *hcomm_worker_last_error(void);

/* Opens a handle. namespace may be NULL; timeout_ms (> 0) bounds each agent exchange. */
int hcomm_worker_open(const char *socket, const char *pod, const char *namespace_,
                      uint32_t timeout_ms, hcomm_worker **out);

/* Leaves the domain (destroys the communicators) and frees the handle. NULL is ignored. */
void hcomm_worker_close(hcomm_worker *h);

/* The member's assignment as JSON. buf NULL or too small: HCOMM_WORKER_E_BUFFER with
 * *needed set (bytes including the NUL). */
int hcomm_worker_assignment(const hcomm_worker *h, char *buf, size_t len, size_t *needed);

/* Waits up to timeout_ms for the agent to place this worker in a newer epoch, then builds
 * that epoch's communicator beside the serving one (all members of the epoch do this
 * together). *epoch gets the prepared epoch. */
int hcomm_worker_prepare(const hcomm_worker *h, uint32_t timeout_ms, uint64_t *epoch);

/* The safe point: the prepared communicator serves from now on; the old one is destroyed.
 * *epoch gets the serving epoch. */
int hcomm_worker_switch(const hcomm_worker *h, uint64_t *epoch);

/* Serving and prepared epochs, the serving communicator's rank and world (-1: none). */
int hcomm_worker_state(const hcomm_worker *h, int64_t *serving, int64_t *prepared,
                       int64_t *rank, int64_t *world);

/* In-place sum all-reduce of n floats on the serving communicator (TCP engine, or on
 * backend hccl the HCCL communicator, staged through device memory). */
int hcomm_worker_all_reduce_sum_f32(const hcomm_worker *h, float *data, size_t n);

/* Load report: requests in flight and queued (the drain's progress once draining). */
int hcomm_worker_report_load(const hcomm_worker *h, uint64_t in_flight, uint64_t queue_depth);

/* Drain me (SIGTERM, or a drain_requested event): take no new work; the agent hears it. */
int hcomm_worker_drain(const hcomm_worker *h);

/* The weights are loaded and the engine takes traffic. */
int hcomm_worker_serving(const hcomm_worker *h);

/* The engine cannot serve: what it needs before traffic (its communicator, say) failed for
 * good. A member still joining is failed with this reason and replaced. */
int hcomm_worker_cannot_serve(const hcomm_worker *h, const char *reason);

/* The next agent event as JSON, e.g. {"event":"epoch_changed","epoch":3},
 * {"event":"drain_requested","deadline":null}, {"event":"weights_ready","path":"/w"}.
 * None within timeout_ms: returns 0 with *needed == 0. A too-small buffer keeps the
 * event for the next call. */
int hcomm_worker_next_event(const hcomm_worker *h, uint32_t timeout_ms, char *buf,
                            size_t len, size_t *needed);

#ifdef __cplusplus
}
#endif

#endif /* HCOMM_WORKER_H */
