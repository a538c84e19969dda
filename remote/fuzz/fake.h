#ifndef FLEXGV_FUZZ_FAKE_H
#define FLEXGV_FUZZ_FAKE_H
#include <stddef.h>
#include <stdint.h>
#include "executor.h"

// fake_driver: the fake answers every operation (fake.c).
void fake_driver(void);
// fake_connection: the connection holds the handles and memory the Go
// tests' requests name (once; later calls do nothing).
void fake_connection(void);
// fake_calls: how many times the driver has been called.
unsigned long fake_calls(void);
// serve_one: 1 when the request is malformed, else 0 with the whole reply
// frame in *out.
int serve_one(unsigned op, const void *p, size_t n, struct fgr_buf *out);
// serve_wait_only: serve_one for a request flagged wait-only (remote/wire.h)
// that another request came beside: its call is not made.
int serve_wait_only(unsigned op, const void *p, size_t n, struct fgr_buf *out);
// name_of: the name the client is given for the driver's handle v.
uint64_t name_of(int kind, uint64_t v);
// buffer_at: a graph copy node's buffer of 64 bytes the connection holds;
// with freed, one of 4096 bytes it gave back.
uint64_t buffer_at(int freed);
// own_address: memory of this process, as the executor's own would be.
uint64_t own_address(void);
// serve_frame: a request frame as a client sends it (the header:
// operation, flags, thread, the context's name; then the arguments), served
// as the executor serves it but for waiting: in the context it names, kept
// in the journal where it made something. 1 when malformed, else 0 with the
// whole reply frame in *out.
int serve_frame(const uint8_t *frame, size_t n, struct fgr_buf *out);
// save_state: the connection's state, as a move gives it to the client (NULL,
// or why it cannot be moved); load_state: a state the client gives taken
// (NULL, or why not), on a connection that has made nothing yet.
const char *save_state(struct fgr_buf *w);
const char *load_state(const uint8_t *p, size_t n);
// run_input: what the native fuzzer gives (native/harness.c), records one
// after another, each its length (4 bytes, little-endian) then its bytes:
// a request frame served, or, after the bytes ff ff, a state to load
// (taken only as the first, and only by a connection that has made
// nothing). fake_connection's handles are added after the first record. A
// reply whose length word does not say its length aborts. How many frames
// were answered (not malformed).
int run_input(const uint8_t *data, size_t n);
#endif
