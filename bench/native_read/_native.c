/* Prototype (issue 26): read exact Kafka offset ranges with librdkafka and build Arrow columns
 * in C, without a Python object per record. Not part of the spark_groups package.
 *
 * librdkafka is not linked: load(path) dlopen()s the very library confluent-kafka's wheel ships
 * (already loaded in the process), so both read paths use the same librdkafka build and no
 * librdkafka headers or packages are needed to compile this file. The few declarations used
 * are those of rdkafka.h (librdkafka, BSD-2-Clause), whose ABI is stable across 1.x/2.x.
 *
 * Arrow: the C data interface (https://arrow.apache.org/docs/format/CDataInterface.html); the
 * caller imports the exported struct with pyarrow.RecordBatch._import_from_c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ librdkafka (rdkafka.h) */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
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
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0
#define ERR__PARTITION_EOF (-191)
#define ERR__AUTO_OFFSET_RESET (-140)
#define ERR_OFFSET_OUT_OF_RANGE 1
#define TS_NOT_AVAILABLE 0

#define RDK_FUNCS(X)                                                                              \
    X(rd_kafka_conf_t *, rd_kafka_conf_new, (void))                                               \
    X(int, rd_kafka_conf_set, (rd_kafka_conf_t *, const char *, const char *, char *, size_t))   \
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
    X(rd_kafka_resp_err_t, rd_kafka_consumer_close, (rd_kafka_t *))                               \
    X(void, rd_kafka_destroy, (rd_kafka_t *))

#define DECLARE(ret, name, args) static ret(*p_##name) args;
RDK_FUNCS(DECLARE)
static int loaded = 0;

/* ------------------------------------------------------------------------- Arrow C ABI */
#define ARROW_FLAG_NULLABLE 2
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
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

/* Large buffers (the value column's data) go back to a small pool when pyarrow releases them:
 * fresh ones would come from mmap() and cost a page fault per 4 KiB on every batch. */
#define POOL_SLOTS 2
#define POOL_MIN ((size_t)1 << 20)
static struct {
    void *p;
    size_t cap;
} pool[POOL_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void pool_put(void *p, size_t cap) {
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (!pool[i].p) {
            pool[i].p = p;
            pool[i].cap = cap;
            p = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    free(p);
}

static void *pool_get(size_t need, size_t *cap) {
    void *p = NULL;
    pthread_mutex_lock(&pool_lock);
    int best = -1;
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
    size_t caps[3]; /* capacity of a pooled buffer, else 0 */
} ArrayPrivate;

static void release_array(struct ArrowArray *a) {
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c->release) c->release(c);
        free(c);
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

/* Fill `a` (owning `bufs`, which are malloc'ed or NULL, and the heap `children`). */
static int fill_array(struct ArrowArray *a, int64_t length, int64_t null_count, int n_buffers,
                      void *b0, void *b1, void *b2, int n_children, struct ArrowArray **children) {
    ArrayPrivate *p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->buffers[0] = b0;
    p->buffers[1] = b1;
    p->buffers[2] = b2;
    memset(a, 0, sizeof *a);
    a->length = length;
    a->null_count = null_count;
    a->n_buffers = n_buffers;
    a->buffers = p->buffers;
    a->n_children = n_children;
    a->children = children;
    a->release = release_array;
    a->private_data = p;
    return 0;
}

static struct ArrowArray *new_array(int64_t length, int64_t null_count, int n_buffers, void *b0,
                                    void *b1, void *b2, int n_children,
                                    struct ArrowArray **children) {
    struct ArrowArray *a = malloc(sizeof *a);
    if (!a || fill_array(a, length, null_count, n_buffers, b0, b1, b2, n_children, children)) {
        free(a);
        return NULL;
    }
    return a;
}

static void release_schema(struct ArrowSchema *s) {
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c->release) c->release(c);
        free(c);
    }
    free(s->children);
    s->release = NULL;
}

static void fill_schema(struct ArrowSchema *s, const char *format, const char *name,
                        int64_t flags, int n_children, struct ArrowSchema **children) {
    memset(s, 0, sizeof *s);
    s->format = format;
    s->name = name;
    s->flags = flags;
    s->n_children = n_children;
    s->children = children;
    s->release = release_schema;
}

static struct ArrowSchema *new_schema(const char *format, const char *name, int n_children,
                                      struct ArrowSchema **children) {
    struct ArrowSchema *s = malloc(sizeof *s);
    if (s) fill_schema(s, format, name, ARROW_FLAG_NULLABLE, n_children, children);
    return s;
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

static inline void *buf_take(Buf *b) {
    void *p = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

/* Validity bitmap kept for every row; exported only when there are nulls. */
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
    v->bits.p = NULL;
    v->bits.len = v->bits.cap = 0;
    return p;
}

/* binary / string: int32 offsets, data, validity */
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
    void *valid = valid_take(&c->valid);
    void *offsets = buf_take(&c->offsets);
    size_t cap = c->data.cap;
    void *data = buf_take(&c->data);
    if (!data) data = malloc(1); /* a non-null data buffer even when empty */
    struct ArrowArray *a = new_array(c->n, nulls, 3, valid, offsets, data, 0, NULL);
    if (!a) {
        free(valid);
        free(offsets);
        free(data);
    } else {
        ((ArrayPrivate *)a->private_data)->caps[2] = cap;
    }
    return a;
}

/* ------------------------------------------------------------------------------ consumer */
typedef struct {
    char *topic;
    size_t topic_len;
    int32_t partition;
    int64_t next, until;
    int done;
    double last_progress;
} Range;

typedef struct {
    VarCol key, value, topic, hkey, hvalue;
    Buf partition, offset, ts, tstype, hoffsets;
    Valid ts_valid, h_valid;
    int64_t n, nh;
} Batch;

typedef struct {
    PyObject_HEAD rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    Range *ranges;
    Py_ssize_t n_ranges, active, last_hit;
    int64_t remaining;
    rd_kafka_message_t **msgs;
    size_t msgs_cap;
    size_t key_hint, value_hint;
    struct ArrowArray out_array;
    struct ArrowSchema out_schema;
    char error[512];
} NConsumer;

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void free_ranges(NConsumer *self) {
    for (Py_ssize_t i = 0; i < self->n_ranges; i++) free(self->ranges[i].topic);
    free(self->ranges);
    self->ranges = NULL;
    self->n_ranges = self->active = 0;
}

static void close_consumer(NConsumer *self) {
    if (self->out_array.release) self->out_array.release(&self->out_array);
    if (self->out_schema.release) self->out_schema.release(&self->out_schema);
    if (self->rk) {
        Py_BEGIN_ALLOW_THREADS;
        if (self->queue) p_rd_kafka_queue_destroy(self->queue);
        p_rd_kafka_consumer_close(self->rk);
        p_rd_kafka_destroy(self->rk);
        Py_END_ALLOW_THREADS;
    }
    self->rk = NULL;
    self->queue = NULL;
    free_ranges(self);
    free(self->msgs);
    self->msgs = NULL;
}

static void NConsumer_dealloc(NConsumer *self) {
    close_consumer(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int NConsumer_init(NConsumer *self, PyObject *args, PyObject *kwds) {
    PyObject *config;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &config)) return -1;
    if (!loaded) {
        PyErr_SetString(PyExc_RuntimeError, "call load(path_of_librdkafka) first");
        return -1;
    }
    char err[512];
    rd_kafka_conf_t *conf = p_rd_kafka_conf_new();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &k, &v)) {
        PyObject *ks = PyObject_Str(k), *vs;
        if (PyBool_Check(v))
            vs = PyUnicode_FromString(v == Py_True ? "true" : "false");
        else
            vs = PyObject_Str(v);
        if (!ks || !vs) {
            Py_XDECREF(ks);
            Py_XDECREF(vs);
            p_rd_kafka_conf_destroy(conf);
            return -1;
        }
        int res = p_rd_kafka_conf_set(conf, PyUnicode_AsUTF8(ks), PyUnicode_AsUTF8(vs), err,
                                      sizeof err);
        Py_DECREF(ks);
        Py_DECREF(vs);
        if (res != RD_KAFKA_CONF_OK) {
            p_rd_kafka_conf_destroy(conf);
            PyErr_SetString(PyExc_ValueError, err);
            return -1;
        }
    }
    self->rk = p_rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!self->rk) {
        p_rd_kafka_conf_destroy(conf);
        PyErr_SetString(PyExc_RuntimeError, err);
        return -1;
    }
    p_rd_kafka_poll_set_consumer(self->rk);
    self->queue = p_rd_kafka_queue_get_consumer(self->rk);
    return 0;
}

static PyObject *raise_error(rd_kafka_error_t *error) {
    PyErr_SetString(PyExc_RuntimeError, p_rd_kafka_error_string(error));
    p_rd_kafka_error_destroy(error);
    return NULL;
}

/* assign(ranges): ranges = [(topic, partition, from, until)], at most one per partition */
static PyObject *NConsumer_assign(NConsumer *self, PyObject *arg) {
    if (!self->rk) return PyErr_Format(PyExc_RuntimeError, "closed");
    PyObject *seq = PySequence_Fast(arg, "ranges must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    free_ranges(self);
    self->ranges = calloc(n ? n : 1, sizeof(Range));
    self->remaining = 0;
    self->last_hit = 0;
    self->error[0] = 0;
    rd_kafka_topic_partition_list_t *list = p_rd_kafka_topic_partition_list_new((int)n);
    double now = monotonic();
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *topic;
        Py_ssize_t topic_len;
        int partition;
        long long from, until;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "s#iLL", &topic, &topic_len,
                              &partition, &from, &until)) {
            p_rd_kafka_topic_partition_list_destroy(list);
            Py_DECREF(seq);
            free_ranges(self);
            return NULL;
        }
        if (until <= from) continue;
        Range *r = &self->ranges[self->n_ranges++];
        r->topic = strdup(topic);
        r->topic_len = (size_t)topic_len;
        r->partition = partition;
        r->next = from;
        r->until = until;
        r->last_progress = now;
        self->remaining += until - from;
        p_rd_kafka_topic_partition_list_add(list, topic, partition)->offset = from;
    }
    Py_DECREF(seq);
    self->active = self->n_ranges;
    rd_kafka_error_t *error = NULL;
    if (self->n_ranges) error = p_rd_kafka_incremental_assign(self->rk, list);
    p_rd_kafka_topic_partition_list_destroy(list);
    if (error) return raise_error(error);
    Py_RETURN_NONE;
}

static PyObject *NConsumer_unassign(NConsumer *self, PyObject *unused) {
    if (self->rk) {
        rd_kafka_resp_err_t err;
        Py_BEGIN_ALLOW_THREADS;
        err = p_rd_kafka_assign(self->rk, NULL);
        Py_END_ALLOW_THREADS;
        if (err) return PyErr_Format(PyExc_RuntimeError, "unassign: %s", p_rd_kafka_err2str(err));
    }
    free_ranges(self);
    Py_RETURN_NONE;
}

static PyObject *NConsumer_close(NConsumer *self, PyObject *unused) {
    close_consumer(self);
    Py_RETURN_NONE;
}

static inline Range *range_of(NConsumer *self, const rd_kafka_message_t *m) {
    if (!m->rkt || !self->n_ranges) return NULL;
    Range *r = &self->ranges[self->last_hit];
    if (r->partition == m->partition && strcmp(r->topic, p_rd_kafka_topic_name(m->rkt)) == 0)
        return r;
    const char *topic = p_rd_kafka_topic_name(m->rkt);
    for (Py_ssize_t i = 0; i < self->n_ranges; i++) {
        r = &self->ranges[i];
        if (r->partition == m->partition && strcmp(r->topic, topic) == 0) {
            self->last_hit = i;
            return r;
        }
    }
    return NULL;
}

static void finish(NConsumer *self, Range *r, rd_kafka_topic_partition_list_t **done) {
    r->done = 1;
    self->active--;
    self->remaining -= r->until - r->next;
    r->next = r->until;
    if (!*done) *done = p_rd_kafka_topic_partition_list_new(4);
    p_rd_kafka_topic_partition_list_add(*done, r->topic, r->partition);
}

#define APPEND(buf, type, value)                                                              \
    do {                                                                                      \
        if (buf_reserve(&(buf), sizeof(type))) goto oom;                                      \
        *(type *)((buf).p + (buf).len) = (value);                                             \
        (buf).len += sizeof(type);                                                            \
    } while (0)

/* Most messages taken from librdkafka at once: each pins its fetch buffer until destroyed, and
 * fetch buffers freed in bulk are unmapped and faulted in afresh on the next fetches. */
#ifndef CONSUME_CHUNK
#define CONSUME_CHUNK 1000
#endif

/* The read loop, without the GIL: fill `b` with up to `rows` records. 0, or -1 with
 * self->error set. */
static int fill(NConsumer *self, Batch *b, int64_t rows, int headers, double timeout_s) {
    while (b->n < rows && self->active > 0) {
        size_t want = (size_t)(rows - b->n);
        if ((int64_t)want > self->remaining) want = (size_t)self->remaining;
        if (want > self->msgs_cap) want = self->msgs_cap;
        if (want > CONSUME_CHUNK) want = CONSUME_CHUNK;
        if (want == 0) want = 1;
        ssize_t got = p_rd_kafka_consume_batch_queue(self->queue, 250, self->msgs, want);
        if (got < 0) {
            snprintf(self->error, sizeof self->error, "consume failed");
            return -1;
        }
        double now = monotonic();
        rd_kafka_topic_partition_list_t *done = NULL;
        ssize_t i = 0;
        for (; i < got; i++) {
            rd_kafka_message_t *m = self->msgs[i];
            Range *r = range_of(self, m);
            if (m->err) {
                if (m->err == ERR__PARTITION_EOF) {
                    /* offsets up to the log end hold no record a consumer receives */
                    if (r && !r->done && m->offset > r->next) {
                        if (m->offset >= r->until) {
                            finish(self, r, &done);
                        } else {
                            self->remaining -= m->offset - r->next;
                            r->next = m->offset;
                            r->last_progress = now;
                        }
                    }
                } else if (m->err == ERR__AUTO_OFFSET_RESET ||
                           m->err == ERR_OFFSET_OUT_OF_RANGE) {
                    snprintf(self->error, sizeof self->error,
                             "%s [%d]: offset out of range (records lost)",
                             r ? r->topic : "?", (int)m->partition);
                    goto fail;
                }
                /* other errors: transient (the prototype retries until the stall timeout) */
                p_rd_kafka_message_destroy(m);
                continue;
            }
            if (!r || r->done || m->offset < r->next) {
                p_rd_kafka_message_destroy(m);
                continue;
            }
            if (m->offset >= r->until) { /* the offsets before it hold no record */
                finish(self, r, &done);
                p_rd_kafka_message_destroy(m);
                continue;
            }
            int64_t row = b->n;
            if (var_append(&b->key, m->key, m->key_len, m->key == NULL) ||
                var_append(&b->value, m->payload, m->len, m->payload == NULL) ||
                var_append(&b->topic, r->topic, r->topic_len, 0))
                goto oom;
            APPEND(b->partition, int32_t, m->partition);
            APPEND(b->offset, int64_t, m->offset);
            int tstype;
            int64_t ms = p_rd_kafka_message_timestamp(m, &tstype);
            APPEND(b->ts, int64_t, tstype == TS_NOT_AVAILABLE ? 0 : ms * 1000);
            if (valid_append(&b->ts_valid, row, tstype != TS_NOT_AVAILABLE)) goto oom;
            APPEND(b->tstype, int32_t, tstype - 1);
            if (headers) {
                rd_kafka_headers_t *hdrs = NULL;
                int has = p_rd_kafka_message_headers(m, &hdrs) == 0 && hdrs;
                if (has) {
                    const char *name;
                    const void *val;
                    size_t size;
                    for (size_t h = 0; !p_rd_kafka_header_get_all(hdrs, h, &name, &val, &size);
                         h++) {
                        if (var_append(&b->hkey, name, strlen(name), 0) ||
                            var_append(&b->hvalue, val, size, val == NULL))
                            goto oom;
                        b->nh++;
                    }
                }
                if (valid_append(&b->h_valid, row, has)) goto oom;
                APPEND(b->hoffsets, int32_t, (int32_t)b->nh);
            }
            b->n++;
            self->remaining--;
            r->next = m->offset + 1;
            r->last_progress = now;
            if (r->next >= r->until) finish(self, r, &done);
            p_rd_kafka_message_destroy(m);
            /* a batch's binary columns use 32-bit offsets: stop well before 2 GiB */
            if (b->value.data.len > (1u << 30) || b->key.data.len > (1u << 30)) {
                for (i++; i < got; i++) p_rd_kafka_message_destroy(self->msgs[i]);
                rows = b->n;
                break;
            }
        }
        if (done) {
            if (self->active) {
                rd_kafka_error_t *error = p_rd_kafka_incremental_unassign(self->rk, done);
                if (error) p_rd_kafka_error_destroy(error);
            }
            p_rd_kafka_topic_partition_list_destroy(done);
        }
        for (Py_ssize_t k = 0; k < self->n_ranges; k++) {
            Range *r = &self->ranges[k];
            if (!r->done && now - r->last_progress >= timeout_s) {
                snprintf(self->error, sizeof self->error,
                         "no progress reading %s [%d] at offset %lld for %g s", r->topic,
                         (int)r->partition, (long long)r->next, timeout_s);
                return -1;
            }
        }
        continue;
    fail:
        for (; i < got; i++) p_rd_kafka_message_destroy(self->msgs[i]);
        if (done) p_rd_kafka_topic_partition_list_destroy(done);
        return -1;
    }
    return 0;
oom:
    snprintf(self->error, sizeof self->error, "out of memory");
    return -1;
}

static void batch_free(Batch *b) {
    var_free(&b->key);
    var_free(&b->value);
    var_free(&b->topic);
    var_free(&b->hkey);
    var_free(&b->hvalue);
    free(b->partition.p);
    free(b->offset.p);
    free(b->ts.p);
    free(b->tstype.p);
    free(b->hoffsets.p);
    free(b->ts_valid.bits.p);
    free(b->h_valid.bits.p);
    memset(b, 0, sizeof *b);
}

static const char *NAMES[] = {"key",    "value",     "topic",         "partition",
                              "offset", "timestamp", "timestampType", "headers"};
static const char *FORMATS[] = {"z", "z", "u", "i", "l", "tsu:UTC", "i", "+l"};

/* Move the batch's columns into self->out_array / self->out_schema. */
static int export_batch(NConsumer *self, Batch *b, int headers) {
    int ncols = headers ? 8 : 7;
    struct ArrowArray **cols = calloc(ncols, sizeof *cols);
    struct ArrowSchema **fields = calloc(ncols, sizeof *fields);
    if (!cols || !fields) goto oom;
    int64_t n = b->n;
    cols[0] = var_export(&b->key);
    cols[1] = var_export(&b->value);
    cols[2] = var_export(&b->topic);
    cols[3] = new_array(n, 0, 2, NULL, buf_take(&b->partition), NULL, 0, NULL);
    cols[4] = new_array(n, 0, 2, NULL, buf_take(&b->offset), NULL, 0, NULL);
    int64_t ts_nulls = b->ts_valid.nulls;
    cols[5] = new_array(n, ts_nulls, 2, valid_take(&b->ts_valid), buf_take(&b->ts), NULL, 0,
                        NULL);
    cols[6] = new_array(n, 0, 2, NULL, buf_take(&b->tstype), NULL, 0, NULL);
    for (int i = 0; i < 7; i++) fields[i] = new_schema(FORMATS[i], NAMES[i], 0, NULL);
    if (headers) {
        struct ArrowArray **kv = calloc(2, sizeof *kv);
        struct ArrowSchema **kvf = calloc(2, sizeof *kvf);
        struct ArrowArray **item = calloc(1, sizeof *item);
        struct ArrowSchema **itemf = calloc(1, sizeof *itemf);
        if (!kv || !kvf || !item || !itemf) goto oom;
        int64_t nh = b->nh;
        kv[0] = var_export(&b->hkey);
        kv[1] = var_export(&b->hvalue);
        kvf[0] = new_schema("u", "key", 0, NULL);
        kvf[1] = new_schema("z", "value", 0, NULL);
        item[0] = new_array(nh, 0, 1, NULL, NULL, NULL, 2, kv);
        itemf[0] = new_schema("+s", "item", 2, kvf);
        int64_t h_nulls = b->h_valid.nulls;
        cols[7] = new_array(n, h_nulls, 2, valid_take(&b->h_valid), buf_take(&b->hoffsets), NULL,
                            1, item);
        fields[7] = new_schema(FORMATS[7], NAMES[7], 1, itemf);
    }
    for (int i = 0; i < ncols; i++)
        if (!cols[i] || !fields[i]) goto oom;
    if (fill_array(&self->out_array, n, 0, 1, NULL, NULL, NULL, ncols, cols)) goto oom;
    fill_schema(&self->out_schema, "+s", "", 0, ncols, fields);
    return 0;
oom: /* a prototype: leaks on allocation failure */
    PyErr_NoMemory();
    return -1;
}

/* next_batch(rows, headers, timeout_s) -> number of rows exported (0: every range is done) */
static PyObject *NConsumer_next_batch(NConsumer *self, PyObject *args) {
    long long rows;
    int headers;
    double timeout_s;
    if (!PyArg_ParseTuple(args, "Lpd", &rows, &headers, &timeout_s)) return NULL;
    if (!self->rk) return PyErr_Format(PyExc_RuntimeError, "closed");
    if (rows < 1) return PyErr_Format(PyExc_ValueError, "rows must be >= 1");
    if (self->out_array.release) self->out_array.release(&self->out_array);
    if (self->out_schema.release) self->out_schema.release(&self->out_schema);
    if (self->msgs_cap < (size_t)rows) {
        free(self->msgs);
        self->msgs_cap = (size_t)rows;
        self->msgs = malloc(self->msgs_cap * sizeof *self->msgs);
        if (!self->msgs) {
            self->msgs_cap = 0;
            return PyErr_NoMemory();
        }
    }
    Batch b;
    memset(&b, 0, sizeof b);
    size_t hint_rows = (size_t)rows;
    if ((int64_t)hint_rows > self->remaining) hint_rows = (size_t)self->remaining;
    if (var_init(&b.key, hint_rows, self->key_hint) ||
        var_init(&b.value, hint_rows, self->value_hint) ||
        var_init(&b.topic, hint_rows, hint_rows * 16) || var_init(&b.hkey, 0, 0) ||
        var_init(&b.hvalue, 0, 0) || buf_reserve(&b.partition, hint_rows * 4) ||
        buf_reserve(&b.offset, hint_rows * 8) || buf_reserve(&b.ts, hint_rows * 8) ||
        buf_reserve(&b.tstype, hint_rows * 4) || buf_reserve(&b.hoffsets, (hint_rows + 1) * 4)) {
        batch_free(&b);
        return PyErr_NoMemory();
    }
    APPEND(b.hoffsets, int32_t, 0);
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = fill(self, &b, rows, headers, timeout_s);
    Py_END_ALLOW_THREADS;
    if (rc) {
        batch_free(&b);
        PyErr_SetString(PyExc_RuntimeError, self->error);
        return NULL;
    }
    if (b.n == 0) {
        batch_free(&b);
        return PyLong_FromLong(0);
    }
    /* next batch's buffers sized like this one's (no regrowth on the hot path) */
    if (b.n == rows) {
        self->key_hint = b.key.data.len + b.key.data.len / 8;
        self->value_hint = b.value.data.len + b.value.data.len / 8;
    }
    int64_t n = b.n;
    if (export_batch(self, &b, headers)) {
        batch_free(&b);
        return NULL;
    }
    batch_free(&b);
    return PyLong_FromLongLong(n);
oom:
    batch_free(&b);
    return PyErr_NoMemory();
}

static PyObject *NConsumer_addresses(NConsumer *self, PyObject *unused) {
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)&self->out_array,
                         (unsigned long long)(uintptr_t)&self->out_schema);
}

static PyMethodDef NConsumer_methods[] = {
    {"assign", (PyCFunction)NConsumer_assign, METH_O, "assign [(topic, partition, from, until)]"},
    {"next_batch", (PyCFunction)NConsumer_next_batch, METH_VARARGS,
     "next_batch(rows, headers, timeout_s) -> rows exported (0: done)"},
    {"addresses", (PyCFunction)NConsumer_addresses, METH_NOARGS,
     "(ArrowArray*, ArrowSchema*) of the exported batch"},
    {"unassign", (PyCFunction)NConsumer_unassign, METH_NOARGS, "unassign everything"},
    {"close", (PyCFunction)NConsumer_close, METH_NOARGS, "close the consumer"},
    {NULL}};

static PyTypeObject NConsumerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_native.Consumer",
    .tp_basicsize = sizeof(NConsumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)NConsumer_init,
    .tp_dealloc = (destructor)NConsumer_dealloc,
    .tp_methods = NConsumer_methods,
};

/* load(path): resolve librdkafka's functions from the shared library at path */
static PyObject *native_load(PyObject *mod, PyObject *arg) {
    if (loaded) Py_RETURN_NONE;
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return PyErr_Format(PyExc_ImportError, "%s", dlerror());
#define RESOLVE(ret, name, args)                                                              \
    p_##name = (ret(*) args)dlsym(h, #name);                                                  \
    if (!p_##name) return PyErr_Format(PyExc_ImportError, "%s lacks %s", path, #name);
    RDK_FUNCS(RESOLVE)
    loaded = 1;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"load", native_load, METH_O, "load(path of librdkafka)"}, {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&NConsumerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&NConsumerType);
    PyModule_AddObject(m, "Consumer", (PyObject *)&NConsumerType);
    return m;
}
