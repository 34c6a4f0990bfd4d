/* spark_groups.read._native: the executor read path's record loop in C (issue 26).
 *
 * One Consumer reads a task's ranges [from, until) and appends each record straight into Arrow
 * buffers (key, value, topic, partition, offset, timestamp, timestampType, headers), without a
 * Python object per record. spark_groups.read.native drives it; every decision other than
 * "which records belong to a range" stays in Python: this file hands back, as events, the
 * client errors librdkafka reports (error_cb), fetch errors and out-of-range errors (a flag on
 * the range), and Python decides (data loss, stalls, typed errors) and tells it to finish() or
 * seek() a range.
 *
 * How a range ends here is spark_groups.read.reader's rule: a record at or past `until - 1`,
 * or an end-of-partition event at or past `until`, completes it; records outside it are dropped.
 *
 * librdkafka is not linked: load(path) dlopen()s the one confluent-kafka's wheel ships, so
 * both read paths run the same librdkafka build. The declarations below are rdkafka.h's
 * (librdkafka, BSD-2-Clause; ABI stable across 1.x and 2.x). Arrow is reached through its C data
 * interface (https://arrow.apache.org/docs/format/CDataInterface.html): Python imports the
 * exported array with pyarrow.RecordBatch._import_from_c(address, schema), without a copy.
 */
#define PY_SSIZE_T_CLEAN
/* Python's limited API of 3.11 (setup.py sets Py_LIMITED_API): one abi3 wheel loads on 3.11
 * and every later CPython. */
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- librdkafka (rdkafka.h) */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
typedef int rd_kafka_resp_err_t;
typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;
typedef struct rd_kafka_topic_partition_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    rd_kafka_resp_err_t err;
    void *_private;
} rd_kafka_topic_partition_t;
typedef void(error_cb_t)(rd_kafka_t *, int, const char *, void *);
typedef void(log_cb_t)(const rd_kafka_t *, int, const char *, const char *);
#define RD_KAFKA_CONSUMER 1
#define ERR__PARTITION_EOF (-191)
#define ERR__AUTO_OFFSET_RESET (-140)
#define ERR_OFFSET_OUT_OF_RANGE 1
#define TS_NOT_AVAILABLE 0

#define RDK_FUNCS(X)                                                                              \
    X(rd_kafka_conf_t *, rd_kafka_conf_new, (void))                                               \
    X(int, rd_kafka_conf_set, (rd_kafka_conf_t *, const char *, const char *, char *, size_t))   \
    X(void, rd_kafka_conf_set_error_cb, (rd_kafka_conf_t *, error_cb_t *))                        \
    X(void, rd_kafka_conf_set_log_cb, (rd_kafka_conf_t *, log_cb_t *))                            \
    X(rd_kafka_resp_err_t, rd_kafka_set_log_queue, (rd_kafka_t *, rd_kafka_queue_t *))            \
    X(void *, rd_kafka_opaque, (const rd_kafka_t *))                                              \
    X(void, rd_kafka_conf_set_opaque, (rd_kafka_conf_t *, void *))                                \
    X(void, rd_kafka_conf_destroy, (rd_kafka_conf_t *))                                           \
    X(rd_kafka_t *, rd_kafka_new, (int, rd_kafka_conf_t *, char *, size_t))                       \
    X(rd_kafka_resp_err_t, rd_kafka_poll_set_consumer, (rd_kafka_t *))                            \
    X(rd_kafka_queue_t *, rd_kafka_queue_get_consumer, (rd_kafka_t *))                            \
    X(void, rd_kafka_queue_destroy, (rd_kafka_queue_t *))                                         \
    X(ssize_t, rd_kafka_consume_batch_queue,                                                      \
      (rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t))                                   \
    X(void, rd_kafka_message_destroy, (rd_kafka_message_t *))                                     \
    X(int64_t, rd_kafka_message_timestamp, (const rd_kafka_message_t *, int *))                   \
    X(rd_kafka_resp_err_t, rd_kafka_message_headers,                                              \
      (const rd_kafka_message_t *, rd_kafka_headers_t **))                                        \
    X(rd_kafka_resp_err_t, rd_kafka_header_get_all,                                               \
      (const rd_kafka_headers_t *, size_t, const char **, const void **, size_t *))               \
    X(const char *, rd_kafka_topic_name, (const rd_kafka_topic_t *))                              \
    X(rd_kafka_topic_partition_list_t *, rd_kafka_topic_partition_list_new, (int))                \
    X(rd_kafka_topic_partition_t *, rd_kafka_topic_partition_list_add,                            \
      (rd_kafka_topic_partition_list_t *, const char *, int32_t))                                 \
    X(void, rd_kafka_topic_partition_list_destroy, (rd_kafka_topic_partition_list_t *))           \
    X(rd_kafka_error_t *, rd_kafka_incremental_assign,                                            \
      (rd_kafka_t *, const rd_kafka_topic_partition_list_t *))                                    \
    X(rd_kafka_error_t *, rd_kafka_incremental_unassign,                                          \
      (rd_kafka_t *, const rd_kafka_topic_partition_list_t *))                                    \
    X(rd_kafka_resp_err_t, rd_kafka_assign, (rd_kafka_t *, const rd_kafka_topic_partition_list_t *)) \
    X(const char *, rd_kafka_error_string, (const rd_kafka_error_t *))                            \
    X(void, rd_kafka_error_destroy, (rd_kafka_error_t *))                                         \
    X(const char *, rd_kafka_err2str, (rd_kafka_resp_err_t))                                      \
    X(rd_kafka_resp_err_t, rd_kafka_query_watermark_offsets,                                      \
      (rd_kafka_t *, const char *, int32_t, int64_t *, int64_t *, int))                           \
    X(rd_kafka_resp_err_t, rd_kafka_get_watermark_offsets,                                        \
      (rd_kafka_t *, const char *, int32_t, int64_t *, int64_t *))                                \
    X(rd_kafka_resp_err_t, rd_kafka_consumer_close, (rd_kafka_t *))                               \
    X(void, rd_kafka_destroy, (rd_kafka_t *))

#define DECLARE(ret, name, args) static ret(*p_##name) args;
RDK_FUNCS(DECLARE)
static int loaded = 0;

/* ------------------------------------------------------------------------- Arrow C ABI */
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* Large buffers (the value column's data) go back to a small pool when pyarrow releases them
 * (on any thread): fresh ones come from mmap() and cost a page fault per 4 KiB, which at 10 KB
 * values made every batch as slow as the Python path. */
#define POOL_SLOTS 2
#define POOL_MIN ((size_t)1 << 20)
static struct {
    void *p;
    size_t cap;
} pool[POOL_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* A forked child (PySpark's workers) must not inherit the lock held by another thread. */
static void pool_after_fork(void) { pthread_mutex_init(&pool_lock, NULL); }

static void pool_put(void *p, size_t cap) {
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS && p; i++)
        if (!pool[i].p) {
            pool[i].p = p;
            pool[i].cap = cap;
            p = NULL;
        }
    pthread_mutex_unlock(&pool_lock);
    free(p);
}

static void *pool_get(size_t need, size_t *cap) {
    void *p = NULL;
    int best = -1;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS; i++)
        if (pool[i].p && pool[i].cap >= need && (best < 0 || pool[i].cap < pool[best].cap))
            best = i;
    if (best >= 0) {
        p = pool[best].p;
        *cap = pool[best].cap;
        pool[best].p = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

typedef struct {
    const void *buffers[3];
    size_t caps[3]; /* the capacity of a buffer that may go back to the pool, else 0 */
} ArrayPrivate;

static void release_array(struct ArrowArray *a) {
    for (int64_t i = 0; i < a->n_children; i++) {
        if (a->children[i] && a->children[i]->release) a->children[i]->release(a->children[i]);
        free(a->children[i]);
    }
    free(a->children);
    ArrayPrivate *p = a->private_data;
    for (int i = 0; i < 3; i++) {
        if (p->caps[i] >= POOL_MIN)
            pool_put((void *)p->buffers[i], p->caps[i]);
        else
            free((void *)p->buffers[i]);
    }
    free(p);
    a->release = NULL;
}

/* Make `a` an array owning the malloc'ed buffers b0..b2 (or NULL) and the heap `children`;
 * on failure they are freed. */
static int fill_array(struct ArrowArray *a, int64_t length, int64_t null_count, int n_buffers,
                      void *b0, void *b1, void *b2, int n_children, struct ArrowArray **children) {
    ArrayPrivate *p = calloc(1, sizeof *p);
    memset(a, 0, sizeof *a);
    if (!p) {
        free(b0), free(b1), free(b2);
        for (int i = 0; i < n_children; i++)
            if (children[i]) children[i]->release(children[i]), free(children[i]);
        free(children);
        return -1;
    }
    p->buffers[0] = b0, p->buffers[1] = b1, p->buffers[2] = b2;
    *a = (struct ArrowArray){length, null_count, 0, n_buffers, n_children, p->buffers,
                             children, NULL, release_array, p};
    return 0;
}

static struct ArrowArray *new_array(int64_t length, int64_t null_count, int n_buffers, void *b0,
                                    void *b1, void *b2, int n_children,
                                    struct ArrowArray **children) {
    struct ArrowArray *a = malloc(sizeof *a);
    if (!a) {
        struct ArrowArray tmp;
        fill_array(&tmp, 0, 0, 0, b0, b1, b2, n_children, children);
        if (tmp.release) tmp.release(&tmp);
        return NULL;
    }
    if (fill_array(a, length, null_count, n_buffers, b0, b1, b2, n_children, children)) {
        free(a);
        return NULL;
    }
    return a;
}

/* ------------------------------------------------------------------------ column builders */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
    void *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

static void *buf_take(Buf *b) {
    void *p = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

/* A validity bitmap, kept for every row; exported only when there are nulls. */
typedef struct {
    Buf bits;
    int64_t nulls;
} Valid;

static inline int valid_append(Valid *v, int64_t row, int ok) {
    if ((row & 7) == 0) {
        if (buf_reserve(&v->bits, 1)) return -1;
        v->bits.p[v->bits.len++] = 0;
    }
    if (ok)
        v->bits.p[row >> 3] |= (uint8_t)(1u << (row & 7));
    else
        v->nulls++;
    return 0;
}

static void *valid_take(Valid *v) {
    void *p = v->nulls ? buf_take(&v->bits) : NULL;
    free(v->bits.p);
    v->bits = (Buf){0};
    return p;
}

/* A binary or string column: int32 offsets, data, validity. */
typedef struct {
    Buf offsets, data;
    Valid valid;
    int64_t n;
} VarCol;

static int var_init(VarCol *c, size_t rows, size_t data_hint) {
    memset(c, 0, sizeof *c);
    if (data_hint >= POOL_MIN) c->data.p = pool_get(data_hint, &c->data.cap);
    if (buf_reserve(&c->offsets, (rows + 1) * 4) || buf_reserve(&c->data, data_hint) ||
        buf_reserve(&c->valid.bits, rows / 8 + 1))
        return -1;
    *(int32_t *)c->offsets.p = 0;
    c->offsets.len = 4;
    return 0;
}

static inline int var_append(VarCol *c, const void *p, size_t len, int is_null) {
    if (valid_append(&c->valid, c->n, !is_null)) return -1;
    if (!is_null && len) {
        if (buf_reserve(&c->data, len)) return -1;
        memcpy(c->data.p + c->data.len, p, len);
        c->data.len += len;
    }
    if (buf_reserve(&c->offsets, 4)) return -1;
    *(int32_t *)(c->offsets.p + c->offsets.len) = (int32_t)c->data.len;
    c->offsets.len += 4;
    c->n++;
    return 0;
}

static void var_free(VarCol *c) {
    free(c->offsets.p);
    free(c->data.p);
    free(c->valid.bits.p);
    memset(c, 0, sizeof *c);
}

static struct ArrowArray *var_export(VarCol *c) {
    int64_t nulls = c->valid.nulls;
    size_t cap = c->data.cap;
    void *valid = valid_take(&c->valid), *offsets = buf_take(&c->offsets);
    void *data = buf_take(&c->data);
    if (!data) data = malloc(1); /* Arrow wants a data buffer even when it is empty */
    struct ArrowArray *a = new_array(c->n, nulls, 3, valid, offsets, data, 0, NULL);
    if (a) ((ArrayPrivate *)a->private_data)->caps[2] = cap;
    return a;
}

/* ------------------------------------------------------------------------------ consumer */
typedef struct {
    char *topic;
    size_t topic_len;
    int32_t partition;
    int64_t next, until;
    int done, out_of_range; /* out_of_range: its records are dropped until Python decides */
    double last_progress;
} Range;

/* One batch's columns, kept between fill() calls until it is full or the ranges are done. */
typedef struct {
    VarCol key, value, topic, hkey, hvalue;
    Buf partition, offset, ts, tstype, hoffsets;
    Valid ts_valid, h_valid;
    int64_t n, nh;
    int open;
} Batch;

/* What Python must decide on: a client error (error_cb) or a fetch error (`index`: the range,
 * or -1). Out-of-range errors are flagged on their ranges instead (events() adds one
 * EV_OUT_OF_RANGE when there are new ones), so that no number of them can overflow. */
enum { EV_CLIENT, EV_FETCH, EV_OUT_OF_RANGE, EV_LOG };
typedef struct {
    int kind, code;
    Py_ssize_t index;
    char reason[256], topic[256];
} Event;
#define MAX_EVENTS 32
/* librdkafka's log lines (EV_LOG, `code` its syslog level) never take the last slots, which
 * errors may need: a flood of log lines in one fill() is cut there instead. */
#define MAX_LOG_EVENTS (MAX_EVENTS - 8)

/* Finished partitions are unassigned a few at a time (each call costs about as much as reading
 * a hundred records), at once when records past a range's end arrive: spark_groups.read.loop's
 * rule. */
#define UNASSIGN_BATCH 64
#define UNASSIGN_WAIT_S 0.05

/* Most messages taken from librdkafka at once: each pins its fetch buffer until destroyed. */
#define CONSUME_CHUNK 1000
#define CONSUME_WAIT_MS 250

typedef struct {
    PyObject_HEAD rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    Range *ranges;
    Py_ssize_t n_ranges, active, last_hit;
    int64_t remaining; /* offsets still to read over the unfinished ranges */
    rd_kafka_message_t **msgs;
    size_t msgs_cap, key_hint, value_hint;
    Batch batch;
    struct ArrowArray out; /* the last exported batch, until Python imports it */
    rd_kafka_topic_partition_list_t *finished;
    int n_finished, past_end;
    double finished_since;
    Event events[MAX_EVENTS]; /* when full, the last one is replaced */
    int n_events, out_of_range; /* out_of_range: a range was flagged since events() */
} NConsumer;

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void add_event(NConsumer *self, int kind, Py_ssize_t index, int code, const char *reason,
                      size_t reason_len, const char *topic) {
    Event *e = &self->events[self->n_events < MAX_EVENTS ? self->n_events++ : MAX_EVENTS - 1];
    e->kind = kind, e->code = code, e->index = index;
    snprintf(e->reason, sizeof e->reason, "%.*s", (int)reason_len, reason ? reason : "");
    snprintf(e->topic, sizeof e->topic, "%s", topic ? topic : "");
}

/* librdkafka's error_cb, served inside consume on the reading thread (no GIL needed). */
static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    add_event(opaque, EV_CLIENT, -1, err, reason, reason ? strlen(reason) : 0, NULL);
}

/* librdkafka's log_cb: with log.queue=true and the log queue forwarded to the consumer's,
 * served inside consume on the reading thread, like on_error. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    NConsumer *self = p_rd_kafka_opaque(rk);
    char line[256];
    if (!self || self->n_events >= MAX_LOG_EVENTS) return;
    int n = snprintf(line, sizeof line, "%s %s", fac ? fac : "", buf ? buf : "");
    add_event(self, EV_LOG, -1, level, line, n < 0 ? 0 : (size_t)n, NULL);
}

static void batch_free(Batch *b) {
    VarCol *vars[] = {&b->key, &b->value, &b->topic, &b->hkey, &b->hvalue};
    for (int i = 0; i < 5; i++) var_free(vars[i]);
    Buf *bufs[] = {&b->partition, &b->offset,        &b->ts,         &b->tstype,
                   &b->hoffsets,  &b->ts_valid.bits, &b->h_valid.bits};
    for (int i = 0; i < 7; i++) free(bufs[i]->p);
    memset(b, 0, sizeof *b);
}

static int batch_open(NConsumer *self, size_t rows) {
    Batch *b = &self->batch;
    if ((int64_t)rows > self->remaining) rows = (size_t)self->remaining;
    memset(b, 0, sizeof *b);
    b->open = 1;
    if (var_init(&b->key, rows, self->key_hint) || var_init(&b->value, rows, self->value_hint) ||
        var_init(&b->topic, rows, rows * 16) || var_init(&b->hkey, 0, 0) ||
        var_init(&b->hvalue, 0, 0) || buf_reserve(&b->partition, rows * 4) ||
        buf_reserve(&b->offset, rows * 8) || buf_reserve(&b->ts, rows * 8) ||
        buf_reserve(&b->tstype, rows * 4) || buf_reserve(&b->hoffsets, (rows + 1) * 4))
        return -1;
    *(int32_t *)b->hoffsets.p = 0;
    b->hoffsets.len = 4;
    return 0;
}

static void reset(NConsumer *self) {
    for (Py_ssize_t i = 0; i < self->n_ranges; i++) free(self->ranges[i].topic);
    free(self->ranges);
    self->ranges = NULL;
    self->n_ranges = self->active = self->last_hit = 0;
    self->remaining = 0;
    batch_free(&self->batch);
    if (self->finished) p_rd_kafka_topic_partition_list_destroy(self->finished);
    self->finished = NULL;
    self->n_finished = self->past_end = self->n_events = self->out_of_range = 0;
}

static void close_consumer(NConsumer *self) {
    if (self->out.release) self->out.release(&self->out);
    if (self->rk) {
        reset(self);
        Py_BEGIN_ALLOW_THREADS;
        p_rd_kafka_queue_destroy(self->queue);
        p_rd_kafka_consumer_close(self->rk);
        p_rd_kafka_destroy(self->rk);
        Py_END_ALLOW_THREADS;
    }
    self->rk = NULL;
    self->queue = NULL;
    free(self->msgs);
    self->msgs = NULL;
    self->msgs_cap = 0;
}

static void NConsumer_dealloc(NConsumer *self) {
    PyTypeObject *type = Py_TYPE((PyObject *)self); /* a heap type: its instances hold a reference */
    close_consumer(self);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DECREF(type);
}

/* Consumer(config: dict[str, str]); a setting librdkafka refuses raises ValueError. */
static int NConsumer_init(NConsumer *self, PyObject *args, PyObject *kwds) {
    PyObject *config, *k, *v;
    Py_ssize_t pos = 0;
    char err[512];
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &config)) return -1;
    if (!loaded) {
        PyErr_SetString(PyExc_RuntimeError, "call load(path of librdkafka) first");
        return -1;
    }
    if (self->rk) close_consumer(self);
    rd_kafka_conf_t *conf = p_rd_kafka_conf_new();
    while (PyDict_Next(config, &pos, &k, &v)) {
        const char *ks = PyUnicode_AsUTF8AndSize(k, NULL),
                   *vs = ks ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
        if (!vs || p_rd_kafka_conf_set(conf, ks, vs, err, sizeof err) != 0) {
            if (vs) PyErr_SetString(PyExc_ValueError, err);
            p_rd_kafka_conf_destroy(conf);
            return -1;
        }
    }
    if (p_rd_kafka_conf_set(conf, "log.queue", "true", err, sizeof err) != 0) {
        PyErr_SetString(PyExc_ValueError, err);
        p_rd_kafka_conf_destroy(conf);
        return -1;
    }
    p_rd_kafka_conf_set_error_cb(conf, on_error);
    p_rd_kafka_conf_set_log_cb(conf, on_log);
    p_rd_kafka_conf_set_opaque(conf, self);
    self->rk = p_rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!self->rk) {
        p_rd_kafka_conf_destroy(conf);
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    p_rd_kafka_poll_set_consumer(self->rk);
    p_rd_kafka_set_log_queue(self->rk, NULL); /* the main queue, forwarded to the consumer's */
    self->queue = p_rd_kafka_queue_get_consumer(self->rk);
    return 0;
}

static PyObject *kafka_error(rd_kafka_error_t *error) {
    PyErr_SetString(PyExc_RuntimeError, p_rd_kafka_error_string(error));
    p_rd_kafka_error_destroy(error);
    return NULL;
}

/* Change the assignment by one partition: assign it at `offset`, or (offset < 0) unassign.
 * 0, or -1 with the exception set. */
static int assign_one(NConsumer *self, Range *r, int64_t offset) {
    rd_kafka_topic_partition_list_t *list = p_rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_t *tp = p_rd_kafka_topic_partition_list_add(list, r->topic, r->partition);
    rd_kafka_error_t *error;
    tp->offset = offset;
    if (offset >= 0)
        error = p_rd_kafka_incremental_assign(self->rk, list);
    else
        error = p_rd_kafka_incremental_unassign(self->rk, list);
    p_rd_kafka_topic_partition_list_destroy(list);
    if (error) kafka_error(error);
    return error ? -1 : 0;
}

/* assign([(topic, partition, from, until)]): the task's non-empty ranges, one per partition;
 * every partition is assigned at its range's start. */
static PyObject *NConsumer_assign(NConsumer *self, PyObject *arg) {
    if (!self->rk) return PyErr_Format(PyExc_RuntimeError, "closed");
    PyObject *seq = PySequence_Tuple(arg);
    if (!seq) return NULL;
    Py_ssize_t n = PyTuple_Size(seq);
    reset(self);
    self->ranges = calloc(n ? n : 1, sizeof(Range));
    if (!self->ranges) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    rd_kafka_topic_partition_list_t *list = p_rd_kafka_topic_partition_list_new((int)n);
    double now = monotonic();
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *topic;
        int partition;
        long long from, until;
        /* No "#" format: its length type follows PY_SSIZE_T_CLEAN, which an abi3 build made
         * with 3.13's headers does not pass on to 3.11 (SystemError there). */
        if (!PyArg_ParseTuple(PyTuple_GetItem(seq, i), "siLL", &topic, &partition, &from,
                              &until)) {
            p_rd_kafka_topic_partition_list_destroy(list);
            Py_DECREF(seq);
            reset(self);
            return NULL;
        }
        Range *r = &self->ranges[self->n_ranges++];
        *r = (Range){strdup(topic), strlen(topic), partition, from, until, 0, 0, now};
        self->remaining += until - from;
        p_rd_kafka_topic_partition_list_add(list, topic, partition)->offset = from;
    }
    Py_DECREF(seq);
    self->active = self->n_ranges;
    rd_kafka_error_t *error = p_rd_kafka_incremental_assign(self->rk, list);
    p_rd_kafka_topic_partition_list_destroy(list);
    if (error) return kafka_error(error);
    Py_RETURN_NONE;
}

/* The range is done: its offsets left are given up (Python's decision) or hold no record. */
static void finish(NConsumer *self, Range *r, double now) {
    r->done = 1;
    self->active--;
    self->remaining -= r->until - r->next;
    if (!self->finished) {
        self->finished = p_rd_kafka_topic_partition_list_new(8);
        self->finished_since = now;
    }
    p_rd_kafka_topic_partition_list_add(self->finished, r->topic, r->partition);
    self->n_finished++;
}

/* `r` has read everything before `offset`. */
static void advance(NConsumer *self, Range *r, int64_t offset, double now) {
    int64_t to = offset < r->until ? offset : r->until;
    self->remaining -= to - r->next;
    r->next = to;
    r->last_progress = now;
    if (to >= r->until) finish(self, r, now);
}

static void stop_fetching(NConsumer *self, double now) {
    if (!self->finished) return;
    if (self->active &&
        !(self->past_end || self->n_finished >= UNASSIGN_BATCH ||
          now - self->finished_since >= UNASSIGN_WAIT_S))
        return;
    if (self->active) { /* the last ones are unassigned with the rest, at check-in */
        rd_kafka_error_t *error = p_rd_kafka_incremental_unassign(self->rk, self->finished);
        if (error) p_rd_kafka_error_destroy(error);
    }
    p_rd_kafka_topic_partition_list_destroy(self->finished);
    self->finished = NULL;
    self->n_finished = self->past_end = 0;
}

static inline Range *range_of(NConsumer *self, const rd_kafka_message_t *m) {
    if (!m->rkt || !self->n_ranges) return NULL;
    const char *topic = p_rd_kafka_topic_name(m->rkt);
    Range *r = &self->ranges[self->last_hit];
    if (r->partition == m->partition && strcmp(r->topic, topic) == 0) return r;
    for (Py_ssize_t i = 0; i < self->n_ranges; i++) {
        r = &self->ranges[i];
        if (r->partition == m->partition && strcmp(r->topic, topic) == 0) {
            self->last_hit = i;
            return r;
        }
    }
    return NULL;
}

#define APPEND(buf, type, value)                                                              \
    do {                                                                                      \
        if (buf_reserve(&(buf), sizeof(type))) return -1;                                     \
        *(type *)((buf).p + (buf).len) = (value);                                             \
        (buf).len += sizeof(type);                                                            \
    } while (0)

/* Append one record of range `r` to the batch; -1: out of memory. */
static int add_record(Batch *b, Range *r, rd_kafka_message_t *m, int headers) {
    int64_t row = b->n;
    int tstype;
    int64_t ms = p_rd_kafka_message_timestamp(m, &tstype);
    if (var_append(&b->key, m->key, m->key_len, m->key == NULL) ||
        var_append(&b->value, m->payload, m->len, m->payload == NULL) ||
        var_append(&b->topic, r->topic, r->topic_len, 0) ||
        valid_append(&b->ts_valid, row, tstype != TS_NOT_AVAILABLE))
        return -1;
    APPEND(b->partition, int32_t, m->partition);
    APPEND(b->offset, int64_t, m->offset);
    APPEND(b->ts, int64_t, tstype == TS_NOT_AVAILABLE ? 0 : ms * 1000); /* ms -> us */
    APPEND(b->tstype, int32_t, tstype - 1); /* librdkafka's types are Kafka's ids + 1 */
    if (headers) {
        rd_kafka_headers_t *hdrs = NULL;
        int has = p_rd_kafka_message_headers(m, &hdrs) == 0 && hdrs;
        const char *name;
        const void *val;
        size_t size;
        for (size_t h = 0; has && !p_rd_kafka_header_get_all(hdrs, h, &name, &val, &size); h++) {
            if (var_append(&b->hkey, name, strlen(name), 0) ||
                var_append(&b->hvalue, val, size, val == NULL))
                return -1;
            b->nh++;
        }
        if (valid_append(&b->h_valid, row, has)) return -1;
        APPEND(b->hoffsets, int32_t, (int32_t)b->nh);
    }
    b->n++;
    return 0;
}

/* One message from librdkafka: a record kept in its range, a range moved on, or an event. */
static int take(NConsumer *self, rd_kafka_message_t *m, int headers, double now) {
    Range *r = range_of(self, m);
    Py_ssize_t index = r ? r - self->ranges : -1;
    if (m->err == ERR__PARTITION_EOF) {
        /* the offsets up to the end of the log hold no record a consumer receives */
        if (r && !r->done && m->offset > r->next) advance(self, r, m->offset, now);
    } else if (m->err == ERR__AUTO_OFFSET_RESET || m->err == ERR_OFFSET_OUT_OF_RANGE) {
        if (r && !r->done) r->out_of_range = self->out_of_range = 1;
    } else if (m->err) { /* the text is librdkafka's rd_kafka_message_errstr() */
        const char *text = m->payload ? m->payload : p_rd_kafka_err2str(m->err);
        add_event(self, EV_FETCH, index, m->err, text, m->payload ? m->len : strlen(text),
                  m->rkt ? p_rd_kafka_topic_name(m->rkt) : NULL);
    } else if (!r || r->out_of_range || m->offset < r->next) {
        /* not a record of a range, or not one still to read */
    } else if (r->done || m->offset >= r->until) {
        self->past_end = 1; /* records past a range's end arrive: stop fetching them now */
        if (!r->done) advance(self, r, r->until, now); /* the offsets before it hold none */
    } else {
        if (add_record(&self->batch, r, m, headers)) return -1;
        advance(self, r, m->offset + 1, now);
    }
    return 0;
}

/* Export the batch into self->out; its rows. */
static int64_t export_batch(NConsumer *self, int headers) {
    Batch *b = &self->batch;
    int64_t n = b->n, ncols = headers ? 8 : 7;
    struct ArrowArray **cols = calloc(ncols, sizeof *cols);
    if (!cols) return -1;
    /* The next batch starts with room for as many bytes (a pooled buffer when one is free) */
    self->key_hint = b->key.data.len;
    self->value_hint = b->value.data.len;
    cols[0] = var_export(&b->key);
    cols[1] = var_export(&b->value);
    cols[2] = var_export(&b->topic);
    cols[3] = new_array(n, 0, 2, NULL, buf_take(&b->partition), NULL, 0, NULL);
    cols[4] = new_array(n, 0, 2, NULL, buf_take(&b->offset), NULL, 0, NULL);
    int64_t ts_nulls = b->ts_valid.nulls;
    cols[5] = new_array(n, ts_nulls, 2, valid_take(&b->ts_valid), buf_take(&b->ts), NULL, 0, NULL);
    cols[6] = new_array(n, 0, 2, NULL, buf_take(&b->tstype), NULL, 0, NULL);
    if (headers) { /* list<struct<key: string, value: binary>> */
        struct ArrowArray **kv = calloc(2, sizeof *kv), **item = calloc(1, sizeof *item);
        if (kv && item) {
            kv[0] = var_export(&b->hkey);
            kv[1] = var_export(&b->hvalue);
            item[0] = new_array(b->nh, 0, 1, NULL, NULL, NULL, 2, kv);
            int64_t h_nulls = b->h_valid.nulls;
            cols[7] = new_array(n, h_nulls, 2, valid_take(&b->h_valid), buf_take(&b->hoffsets),
                                NULL, 1, item);
        } else {
            free(kv), free(item);
        }
    }
    int ok = 1;
    for (int i = 0; i < ncols; i++) ok = ok && cols[i];
    if (fill_array(&self->out, n, 0, 1, NULL, NULL, NULL, ncols, cols) || !ok) {
        if (self->out.release) self->out.release(&self->out);
        n = -1;
    }
    batch_free(b);
    return n;
}

/* fill(rows, headers, wait_s) -> n: read on into the open batch, without the GIL, until it
 * holds `rows` records, every range is done, an event waits for Python, or `wait_s` passed.
 * n > 0: a batch of n rows is exported (address()); 0: none yet (see events(), progress());
 * -1: every range is done and nothing is left to export. */
static PyObject *NConsumer_fill(NConsumer *self, PyObject *args) {
    long long rows;
    int headers, failed = 0;
    double wait_s;
    if (!PyArg_ParseTuple(args, "Lpd", &rows, &headers, &wait_s)) return NULL;
    if (!self->rk) return PyErr_Format(PyExc_RuntimeError, "closed");
    if (rows < 1) return PyErr_Format(PyExc_ValueError, "rows must be >= 1");
    if (self->out.release) self->out.release(&self->out); /* not imported: dropped */
    if (self->msgs_cap < CONSUME_CHUNK) {
        self->msgs = malloc(CONSUME_CHUNK * sizeof *self->msgs);
        if (!self->msgs) return PyErr_NoMemory();
        self->msgs_cap = CONSUME_CHUNK;
    }
    Batch *b = &self->batch;
    if (!b->open && self->active && batch_open(self, (size_t)rows)) {
        batch_free(b);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS;
    double start = monotonic(), now = start;
    while (b->n < rows && self->active > 0 && !self->n_events && !self->out_of_range && !failed) {
        int64_t want = rows - b->n;
        if (want > self->remaining) want = self->remaining;
        if (want > CONSUME_CHUNK) want = CONSUME_CHUNK;
        if (want < 1) want = 1;
        double left_ms = (wait_s - (now - start)) * 1000;
        int wait_ms = left_ms > CONSUME_WAIT_MS ? CONSUME_WAIT_MS : left_ms < 0 ? 0 : (int)left_ms;
        ssize_t got = p_rd_kafka_consume_batch_queue(self->queue, wait_ms, self->msgs, want);
        now = monotonic();
        for (ssize_t i = 0; i < got; i++) {
            failed = failed || take(self, self->msgs[i], headers, now);
            p_rd_kafka_message_destroy(self->msgs[i]);
        }
        stop_fetching(self, now);
        /* a batch's binary columns have 32-bit offsets: export it well before 2 GiB */
        if (b->value.data.len > (1u << 30) || b->key.data.len > (1u << 30)) rows = b->n;
        if (got < 0) failed = 2;
        if (now - start >= wait_s) break;
    }
    Py_END_ALLOW_THREADS;
    if (failed == 2) return PyErr_Format(PyExc_RuntimeError, "consuming from librdkafka failed");
    if (failed) return PyErr_NoMemory();
    int64_t n = 0;
    if (b->n > 0 && (b->n >= rows || self->active == 0)) {
        n = export_batch(self, headers);
        if (n < 0) return PyErr_NoMemory();
    } else if (self->active == 0) {
        batch_free(b);
        n = -1;
    }
    return PyLong_FromLongLong(n);
}

/* address() -> the ArrowArray* of the exported batch (a struct array of its columns). */
static PyObject *NConsumer_address(NConsumer *self, PyObject *unused) {
    return PyLong_FromVoidPtr(&self->out);
}

/* events() -> [(kind, range index or -1, error code, text, topic or None)], emptied; ends in
 * (EV_OUT_OF_RANGE, -1, 0, "", None) when ranges were flagged out of range (progress()). */
static PyObject *NConsumer_events(NConsumer *self, PyObject *unused) {
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i <= self->n_events; i++) {
        Event *e = &self->events[i], oor = {EV_OUT_OF_RANGE, 0, -1, "", ""};
        if (i == self->n_events && !self->out_of_range) break;
        if (i == self->n_events) e = &oor;
        PyObject *t = Py_BuildValue("(iniss)", e->kind, e->index, e->code, e->reason,
                                    e->topic[0] ? e->topic : NULL);
        if (!t || PyList_Append(list, t)) Py_CLEAR(list);
        Py_XDECREF(t);
    }
    self->n_events = self->out_of_range = 0;
    return list;
}

/* progress() -> [(next offset, done, seconds since its last progress, out of range)] of every
 * range. */
static PyObject *NConsumer_progress(NConsumer *self, PyObject *unused) {
    double now = monotonic();
    PyObject *list = PyList_New(self->n_ranges);
    for (Py_ssize_t i = 0; list && i < self->n_ranges; i++) {
        Range *r = &self->ranges[i];
        PyObject *t = Py_BuildValue("(Lidi)", (long long)r->next, r->done,
                                    now - r->last_progress, r->out_of_range);
        if (!t || PyList_SetItem(list, i, t)) Py_CLEAR(list); /* SetItem steals t */
    }
    return list;
}

static Range *range_at(NConsumer *self, Py_ssize_t index) {
    if (index >= 0 && index < self->n_ranges && !self->ranges[index].done)
        return &self->ranges[index];
    PyErr_Format(PyExc_ValueError, "no unfinished range %zd", index);
    return NULL;
}

/* finish(index): give up the rest of the range (Python's decision after a stall or loss). */
static PyObject *NConsumer_finish(NConsumer *self, PyObject *arg) {
    Range *r = range_at(self, PyLong_AsSsize_t(arg));
    if (!r) return NULL;
    finish(self, r, monotonic());
    Py_RETURN_NONE;
}

/* seek(index, offset): read the range on from `offset` (the new log start after records were
 * deleted): its partition is assigned afresh there. */
static PyObject *NConsumer_seek(NConsumer *self, PyObject *args) {
    Py_ssize_t index;
    long long offset;
    if (!PyArg_ParseTuple(args, "nL", &index, &offset)) return NULL;
    Range *r = range_at(self, index);
    if (!r || assign_one(self, r, -1) || assign_one(self, r, offset)) return NULL;
    self->remaining -= offset - r->next;
    r->next = offset;
    r->last_progress = monotonic();
    r->out_of_range = 0;
    Py_RETURN_NONE;
}

/* watermarks(topic, partition, timeout_ms) -> (error code, low, high): asked of the broker, or
 * (timeout_ms < 0) the last ones fetched. */
static PyObject *NConsumer_watermarks(NConsumer *self, PyObject *args) {
    const char *topic;
    int partition, timeout_ms;
    int64_t low = -1001, high = -1001; /* RD_KAFKA_OFFSET_INVALID */
    rd_kafka_resp_err_t err;
    if (!PyArg_ParseTuple(args, "sii", &topic, &partition, &timeout_ms)) return NULL;
    if (!self->rk) return PyErr_Format(PyExc_RuntimeError, "closed");
    if (timeout_ms < 0) {
        err = p_rd_kafka_get_watermark_offsets(self->rk, topic, partition, &low, &high);
    } else {
        Py_BEGIN_ALLOW_THREADS;
        err = p_rd_kafka_query_watermark_offsets(self->rk, topic, partition, &low, &high,
                                                 timeout_ms);
        Py_END_ALLOW_THREADS;
    }
    return Py_BuildValue("(iLL)", err, (long long)low, (long long)high);
}

/* unassign(): stop fetching every partition and forget the ranges (check-in to the pool). */
static PyObject *NConsumer_unassign(NConsumer *self, PyObject *unused) {
    if (!self->rk) return PyErr_Format(PyExc_RuntimeError, "closed");
    reset(self);
    rd_kafka_resp_err_t err;
    Py_BEGIN_ALLOW_THREADS;
    err = p_rd_kafka_assign(self->rk, NULL);
    Py_END_ALLOW_THREADS;
    if (err) return PyErr_Format(PyExc_RuntimeError, "unassign: %s", p_rd_kafka_err2str(err));
    Py_RETURN_NONE;
}

static PyObject *NConsumer_close(NConsumer *self, PyObject *unused) {
    close_consumer(self);
    Py_RETURN_NONE;
}

static PyMethodDef NConsumer_methods[] = {
    {"assign", (PyCFunction)NConsumer_assign, METH_O, "assign([(topic, partition, from, until)])"},
    {"fill", (PyCFunction)NConsumer_fill, METH_VARARGS, "fill(rows, headers, wait_s) -> n"},
    {"address", (PyCFunction)NConsumer_address, METH_NOARGS, "address of the exported array"},
    {"events", (PyCFunction)NConsumer_events, METH_NOARGS, "the events met, emptied"},
    {"progress", (PyCFunction)NConsumer_progress, METH_NOARGS,
     "[(next, done, idle_s, out_of_range)]"},
    {"finish", (PyCFunction)NConsumer_finish, METH_O, "finish(index): give the range up"},
    {"seek", (PyCFunction)NConsumer_seek, METH_VARARGS, "seek(index, offset)"},
    {"watermarks", (PyCFunction)NConsumer_watermarks, METH_VARARGS,
     "watermarks(topic, partition, timeout_ms) -> (err, low, high)"},
    {"unassign", (PyCFunction)NConsumer_unassign, METH_NOARGS, "unassign everything"},
    {"close", (PyCFunction)NConsumer_close, METH_NOARGS, "close the consumer"},
    {NULL}};

static PyType_Slot NConsumer_slots[] = {
    {Py_tp_doc, "A librdkafka consumer reading a task's ranges into Arrow batches."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, NConsumer_init},
    {Py_tp_dealloc, NConsumer_dealloc},
    {Py_tp_methods, NConsumer_methods},
    {0, NULL}};

static PyType_Spec NConsumer_spec = {"spark_groups.read._native.Consumer", sizeof(NConsumer), 0,
                                     Py_TPFLAGS_DEFAULT, NConsumer_slots};

/* load(path): resolve librdkafka's functions from the shared library at `path`. */
static PyObject *native_load(PyObject *mod, PyObject *arg) {
    if (loaded) Py_RETURN_NONE;
    const char *path = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!path) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return PyErr_Format(PyExc_ImportError, "%s", dlerror());
#define RESOLVE(ret, name, args)                                                              \
    if (!(p_##name = (ret(*) args)dlsym(h, #name)))                                           \
        return PyErr_Format(PyExc_ImportError, "%s lacks %s", path, #name);
    RDK_FUNCS(RESOLVE)
    loaded = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"load", native_load, METH_O, "load(path of librdkafka)"}, {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native",
                                    "The executor read path's record loop in C.", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *type = PyType_FromSpec(&NConsumer_spec);
    if (!type || PyModule_AddObject(m, "Consumer", type) < 0) { /* steals type on success */
        Py_XDECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    pthread_atfork(NULL, NULL, pool_after_fork);
    return m;
}
