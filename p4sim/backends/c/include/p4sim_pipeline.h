/* The contract between a compiled pipeline and the C dataplane.
 *
 * A compiled pipeline (backends/c: one shared object per P4 program) runs one frame at a
 * time and appends every frame the switch sends to an outbuf. The dataplane (program
 * independent: sockets, batching, pcap, the slow target) hands it each frame it receives
 * and sends what comes out. Neither links against the other: the dataplane is given the
 * pipeline's process function and context as two pointers, and can be given new ones when
 * the controller pushes a new program.
 */
#ifndef P4SIM_PIPELINE_H
#define P4SIM_PIPELINE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One frame the switch sends: `len` bytes at `offset` in the outbuf's data, out of `port`. */
typedef struct p4sim_frame {
    uint32_t port;
    uint32_t len;
    uint32_t offset;
} p4sim_frame;

/* Frames appended by a pipeline; the caller owns it and reuses it (clear, then process). */
typedef struct p4sim_outbuf {
    uint8_t *data;
    uint32_t used, cap;
    p4sim_frame *frames;
    uint32_t count, max;
} p4sim_outbuf;

/* Room for one more frame of `len` bytes to `port`, growing the buffer as needed; the frame's
 * bytes are to be written at the pointer returned. NULL if memory ran out (the frame is lost). */
static inline uint8_t *p4sim_outbuf_add(p4sim_outbuf *ob, uint32_t port, uint32_t len) {
    if (ob->count == ob->max) {
        uint32_t max = ob->max ? 2 * ob->max : 16;
        p4sim_frame *f = (p4sim_frame *)realloc(ob->frames, max * sizeof *f);
        if (f == NULL) return NULL;
        ob->frames = f;
        ob->max = max;
    }
    if (ob->used + len > ob->cap) {
        uint32_t cap = ob->cap ? ob->cap : 4096;
        while (cap < ob->used + len) cap *= 2;
        uint8_t *d = (uint8_t *)realloc(ob->data, cap);
        if (d == NULL) return NULL;
        ob->data = d;
        ob->cap = cap;
    }
    p4sim_frame *f = &ob->frames[ob->count++];
    f->port = port;
    f->len = len;
    f->offset = ob->used;
    ob->used += len;
    return ob->data + f->offset;
}

static inline void p4sim_outbuf_clear(p4sim_outbuf *ob) { ob->used = ob->count = 0; }

static inline void p4sim_outbuf_free(p4sim_outbuf *ob) {
    free(ob->data);
    free(ob->frames);
    memset(ob, 0, sizeof *ob);
}

/* Run one frame received on `port` through the switch; every frame it sends is appended to
 * `out`, in order. Safe to call from any thread: the pipeline serialises packets and
 * control-plane writes itself. Returns 0 (also when the program dropped the frame). */
typedef int (*p4sim_process_fn)(void *pipeline, uint32_t port, const uint8_t *data, uint32_t len,
                                p4sim_outbuf *out);

#endif
