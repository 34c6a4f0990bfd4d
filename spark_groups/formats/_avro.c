/* Avro records in Confluent's wire format decoded into Arrow buffers, in C.
 *
 * A program (compiled in Python by spark_groups/formats/avro_program.py from a writer and a
 * reader schema) is a list of int32 operations: read a value of the writer's type into one
 * column of the reader's layout (promoting it where Avro's resolution does), skip a field the
 * reader lacks, fill one it lacks from its encoded default, branch on a union, loop over an
 * array's or map's blocks. A record that cannot be read (truncated, a bad union or enum
 * index, invalid UTF-8, a decimal out of range, an unresolvable branch) is rolled back and
 * made null, and its row and reason code reported. The buffers go back to Python as bytes;
 * Python assembles the Arrow arrays. Python's limited API (3.11), no other library.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_STRUCT, K_BOOL, K_I32, K_I64, K_F32, K_F64, K_BIN, K_STR, K_LIST, K_DEC };
enum {
    OP_END, OP_LONG, OP_INT, OP_INT_LONG, OP_INT_FLOAT, OP_INT_DOUBLE, OP_LONG_FLOAT,
    OP_LONG_DOUBLE, OP_FLOAT, OP_FLOAT_DOUBLE, OP_DOUBLE, OP_BOOL, OP_BYTES, OP_FIXED,
    OP_DEC_BYTES, OP_DEC_FIXED, OP_ENUM, OP_STRUCT, OP_NULL, OP_SKIP_VARINT, OP_SKIP_N,
    OP_SKIP_BYTES, OP_UNION, OP_JUMP, OP_ARRAY, OP_CONST, OP_ERROR, OP_STRING
};
/* Why a record could not be read (Python names each: avro_program.REASONS). */
enum { E_HEADER = 1, E_DATA, E_ENUM_INDEX, E_UNION_INDEX, E_ENUM_SYMBOL, E_UTF8, E_DECIMAL,
       E_INT_RANGE, E_NO_MEMORY, E_ERROR_OP = 100 };

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    void *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

typedef struct {
    int kind;
    Buf a, b, valid; /* values or offsets; string data; validity bits */
    int64_t n;       /* entries */
    int64_t items;   /* a list's child entries so far */
} Col;

typedef struct {
    Col *cols;
    int ncols;
    PyObject *enums;  /* tuple of tuples of bytes or None */
    PyObject *consts; /* tuple of bytes */
    const int32_t *prog;
    Py_ssize_t prog_len;
} Ctx;

typedef struct {
    const uint8_t *p, *end;
} In;

/* ------------------------------------------------------------------------------ columns */
static inline int bit_append(Buf *bits, int64_t i, int on) {
    if ((i & 7) == 0) {
        if (buf_reserve(bits, 1)) return -1;
        bits->p[bits->len++] = 0;
    }
    if (on) bits->p[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

static inline void bits_truncate(Buf *bits, int64_t n) {
    bits->len = (size_t)((n + 7) / 8);
    if (n & 7) bits->p[n >> 3] &= (uint8_t)((1u << (n & 7)) - 1);
}

static inline int col_fixed(Col *c, const void *v, size_t width) {
    if (bit_append(&c->valid, c->n, 1) || buf_reserve(&c->a, width)) return -1;
    memcpy(c->a.p + c->a.len, v, width);
    c->a.len += width;
    c->n++;
    return 0;
}

static inline int col_offset(Col *c, int64_t end) {
    int32_t o = (int32_t)end;
    if (buf_reserve(&c->a, 4)) return -1;
    memcpy(c->a.p + c->a.len, &o, 4);
    c->a.len += 4;
    return 0;
}

static inline int col_var(Col *c, const uint8_t *p, size_t len) {
    if (bit_append(&c->valid, c->n, 1) || buf_reserve(&c->b, len)) return -1;
    if (len) memcpy(c->b.p + c->b.len, p, len);
    c->b.len += len;
    if (col_offset(c, (int64_t)c->b.len)) return -1;
    c->n++;
    return 0;
}

static int col_null(Col *c) {
    static const uint8_t zeros[16] = {0};
    if (bit_append(&c->valid, c->n, 0)) return -1;
    switch (c->kind) {
    case K_STRUCT: break;
    case K_BOOL:
        if (bit_append(&c->a, c->n, 0)) return -1;
        break;
    case K_I32: case K_F32:
        if (buf_reserve(&c->a, 4)) return -1;
        memcpy(c->a.p + c->a.len, zeros, 4), c->a.len += 4;
        break;
    case K_I64: case K_F64:
        if (buf_reserve(&c->a, 8)) return -1;
        memcpy(c->a.p + c->a.len, zeros, 8), c->a.len += 8;
        break;
    case K_DEC:
        if (buf_reserve(&c->a, 16)) return -1;
        memcpy(c->a.p + c->a.len, zeros, 16), c->a.len += 16;
        break;
    case K_BIN: case K_STR:
        if (col_offset(c, (int64_t)c->b.len)) return -1;
        break;
    case K_LIST:
        if (col_offset(c, c->items)) return -1;
        break;
    }
    c->n++;
    return 0;
}

static int col_init(Col *c, int kind, int64_t rows) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    if (kind == K_BIN || kind == K_STR || kind == K_LIST) return col_offset(c, 0);
    (void)rows;
    return 0;
}

static void col_free(Col *c) {
    free(c->a.p), free(c->b.p), free(c->valid.p);
    memset(c, 0, sizeof *c);
}

typedef struct {
    int64_t n, items;
    size_t a, b;
} Mark;

static void col_mark(const Col *c, Mark *m) { *m = (Mark){c->n, c->items, c->a.len, c->b.len}; }

static void col_rollback(Col *c, const Mark *m) {
    c->n = m->n, c->items = m->items, c->b.len = m->b;
    bits_truncate(&c->valid, m->n);
    if (c->kind == K_BOOL)
        bits_truncate(&c->a, m->n);
    else
        c->a.len = m->a;
}

/* -------------------------------------------------------------------------------- input */
static inline int read_varint(In *in, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (in->p >= in->end) return E_DATA;
        uint8_t byte = *in->p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1)); /* zigzag */
            return 0;
        }
    }
    return E_DATA;
}

static inline int read_n(In *in, size_t n, const uint8_t **p) {
    if ((size_t)(in->end - in->p) < n) return E_DATA;
    *p = in->p;
    in->p += n;
    return 0;
}

static inline int read_len(In *in, size_t *len) {
    int64_t v;
    int e = read_varint(in, &v);
    if (e) return e;
    if (v < 0 || (uint64_t)v > (uint64_t)(in->end - in->p)) return E_DATA;
    *len = (size_t)v;
    return 0;
}

static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* eight ASCII bytes at once */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0)
            k = 1, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0)
            k = 2, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0)
            k = 3, cp = c & 0x07;
        else
            return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* A big-endian two's complement integer of `len` bytes as a 16-byte little-endian decimal,
 * checked to have at most `precision` digits. */
static int decimal(const uint8_t *p, size_t len, int precision, uint8_t out[16]) {
    if (len > 16) return E_DECIMAL;
    __int128 v = (len && (p[0] & 0x80)) ? -1 : 0;
    for (size_t i = 0; i < len; i++) v = (__int128)(((unsigned __int128)v << 8) | p[i]);
    __int128 limit = 1;
    for (int i = 0; i < precision; i++) limit *= 10;
    if (v >= limit || v <= -limit) return E_DECIMAL;
    unsigned __int128 u = (unsigned __int128)v;
    for (int i = 0; i < 16; i++) out[i] = (uint8_t)(u >> (8 * i));
    return 0;
}

/* ------------------------------------------------------------------------------ program */
static int run(Ctx *x, In *in, Py_ssize_t pc, Py_ssize_t end);

static int run_const(Ctx *x, int32_t k, Py_ssize_t pc, Py_ssize_t end) {
    PyObject *item = PyTuple_GetItem(x->consts, k);
    char *data;
    Py_ssize_t n;
    if (!item || PyBytes_AsStringAndSize(item, &data, &n)) {
        PyErr_Clear();
        return E_NO_MEMORY;
    }
    In in = {(const uint8_t *)data, (const uint8_t *)data + n};
    return run(x, &in, pc, end);
}

static int run(Ctx *x, In *in, Py_ssize_t pc, Py_ssize_t end) {
    const int32_t *prog = x->prog;
    int64_t v;
    const uint8_t *p;
    size_t len;
    int e;
    while (pc < end) {
        int32_t op = prog[pc];
        Col *c = NULL;
        if ((op >= OP_LONG && op <= OP_STRUCT) || op == OP_STRING) c = &x->cols[prog[pc + 1]];
        switch (op) {
        case OP_END:
            return 0;
        case OP_LONG: case OP_INT: case OP_INT_LONG:
            if ((e = read_varint(in, &v))) return e;
            if (op == OP_INT) {
                if (v < INT32_MIN || v > INT32_MAX) return E_INT_RANGE;
                int32_t i = (int32_t)v;
                if (col_fixed(c, &i, 4)) return E_NO_MEMORY;
            } else if (col_fixed(c, &v, 8))
                return E_NO_MEMORY;
            pc += 2;
            break;
        case OP_INT_FLOAT: case OP_LONG_FLOAT: {
            if ((e = read_varint(in, &v))) return e;
            float f = (float)v;
            if (col_fixed(c, &f, 4)) return E_NO_MEMORY;
            pc += 2;
            break;
        }
        case OP_INT_DOUBLE: case OP_LONG_DOUBLE: {
            if ((e = read_varint(in, &v))) return e;
            double d = (double)v;
            if (col_fixed(c, &d, 8)) return E_NO_MEMORY;
            pc += 2;
            break;
        }
        case OP_FLOAT:
            if ((e = read_n(in, 4, &p))) return e;
            if (col_fixed(c, p, 4)) return E_NO_MEMORY;
            pc += 2;
            break;
        case OP_FLOAT_DOUBLE: {
            float f;
            if ((e = read_n(in, 4, &p))) return e;
            memcpy(&f, p, 4);
            double d = f;
            if (col_fixed(c, &d, 8)) return E_NO_MEMORY;
            pc += 2;
            break;
        }
        case OP_DOUBLE:
            if ((e = read_n(in, 8, &p))) return e;
            if (col_fixed(c, p, 8)) return E_NO_MEMORY;
            pc += 2;
            break;
        case OP_BOOL:
            if ((e = read_n(in, 1, &p))) return e;
            if (*p > 1) return E_DATA;
            if (bit_append(&c->valid, c->n, 1) || bit_append(&c->a, c->n, *p)) return E_NO_MEMORY;
            c->n++;
            pc += 2;
            break;
        case OP_BYTES: case OP_FIXED: case OP_STRING: /* a string is UTF-8 whatever it fills */
            if (op != OP_FIXED) {
                if ((e = read_len(in, &len))) return e;
            } else
                len = (size_t)prog[pc + 2];
            if ((e = read_n(in, len, &p))) return e;
            if ((c->kind == K_STR || op == OP_STRING) && !utf8_valid(p, len)) return E_UTF8;
            if (col_var(c, p, len)) return E_NO_MEMORY;
            pc += op == OP_FIXED ? 3 : 2;
            break;
        case OP_DEC_BYTES: case OP_DEC_FIXED: {
            uint8_t out[16];
            int precision;
            if (op == OP_DEC_BYTES) {
                if ((e = read_len(in, &len))) return e;
                precision = prog[pc + 2];
            } else
                len = (size_t)prog[pc + 2], precision = prog[pc + 3];
            if ((e = read_n(in, len, &p)) || (e = decimal(p, len, precision, out))) return e;
            if (col_fixed(c, out, 16)) return E_NO_MEMORY;
            pc += op == OP_DEC_BYTES ? 3 : 4;
            break;
        }
        case OP_ENUM: {
            if ((e = read_varint(in, &v))) return e;
            PyObject *table = PyTuple_GetItem(x->enums, prog[pc + 2]);
            if (!table) return PyErr_Clear(), E_NO_MEMORY;
            if (v < 0 || v >= PyTuple_Size(table)) return E_ENUM_INDEX;
            PyObject *symbol = PyTuple_GetItem(table, (Py_ssize_t)v);
            char *s;
            Py_ssize_t n;
            if (symbol == Py_None) return E_ENUM_SYMBOL;
            if (PyBytes_AsStringAndSize(symbol, &s, &n)) return PyErr_Clear(), E_NO_MEMORY;
            if (col_var(c, (const uint8_t *)s, (size_t)n)) return E_NO_MEMORY;
            pc += 3;
            break;
        }
        case OP_STRUCT:
            if (bit_append(&c->valid, c->n, 1)) return E_NO_MEMORY;
            c->n++;
            pc += 2;
            break;
        case OP_NULL:
            if (col_null(&x->cols[prog[pc + 1]])) return E_NO_MEMORY;
            pc += 2;
            break;
        case OP_SKIP_VARINT:
            if ((e = read_varint(in, &v))) return e;
            pc += 1;
            break;
        case OP_SKIP_N:
            if ((e = read_n(in, (size_t)prog[pc + 1], &p))) return e;
            pc += 2;
            break;
        case OP_SKIP_BYTES:
            if ((e = read_len(in, &len)) || (e = read_n(in, len, &p))) return e;
            pc += 1;
            break;
        case OP_UNION: {
            int32_t n = prog[pc + 1];
            if ((e = read_varint(in, &v))) return e;
            if (v < 0 || v >= n) return E_UNION_INDEX;
            pc += prog[pc + 2 + v]; /* offsets relative to the union: bodies move as one */
            break;
        }
        case OP_JUMP:
            pc += prog[pc + 1];
            break;
        case OP_ARRAY: {
            /* col (-1: skipped), the body's length, whether every item takes a byte */
            int32_t col = prog[pc + 1], body = prog[pc + 2], sized = prog[pc + 3];
            Py_ssize_t start = pc + 4, stop = pc + 4 + body;
            int64_t total = 0, count;
            for (;;) {
                if ((e = read_varint(in, &count))) return e;
                if (count == 0) break;
                if (count < 0) {
                    int64_t size;
                    count = -count;
                    if ((e = read_varint(in, &size))) return e;
                }
                if (count > INT32_MAX - total || (sized && count > (int64_t)(in->end - in->p)))
                    return E_DATA;
                for (int64_t i = 0; i < count; i++)
                    if ((e = run(x, in, start, stop))) return e;
                total += count;
            }
            if (col >= 0) {
                Col *list = &x->cols[col];
                list->items += total;
                if (bit_append(&list->valid, list->n, 1) || col_offset(list, list->items))
                    return E_NO_MEMORY;
                list->n++;
            }
            pc = stop;
            break;
        }
        case OP_CONST: {
            int32_t k = prog[pc + 1], body = prog[pc + 2];
            if ((e = run_const(x, k, pc + 3, pc + 3 + body))) return e;
            pc += 3 + body;
            break;
        }
        case OP_ERROR:
            return E_ERROR_OP + prog[pc + 1];
        default:
            return E_DATA;
        }
    }
    return 0;
}

/* --------------------------------------------------------------------------------- module */
static int as_program(PyObject *bytes, const int32_t **prog, Py_ssize_t *len) {
    char *p;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(bytes, &p, &n)) return -1;
    *prog = (const int32_t *)p;
    *len = n / 4;
    return 0;
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? (const char *)b->p : "", (Py_ssize_t)b->len);
}

static int64_t nulls_of(const Col *c) {
    int64_t valid = 0;
    for (int64_t i = 0; i < c->n; i++) valid += (c->valid.p[i >> 3] >> (i & 7)) & 1;
    return c->n - valid;
}

/* decode(kinds, programs, ids, null_program, enums, consts, values) ->
 *   (columns: [(validity or None, buffer, data or None, length)], bad: [(row, code)]) */
static PyObject *avro_decode(PyObject *self, PyObject *args) {
    PyObject *kinds, *programs, *ids, *null_prog_obj, *enums, *consts, *values;
    (void)self;
    if (!PyArg_ParseTuple(args, "SO!O!SO!O!O!", &kinds, &PyTuple_Type, &programs, &PyDict_Type,
                          &ids, &null_prog_obj, &PyTuple_Type, &enums, &PyTuple_Type, &consts,
                          &PyList_Type, &values))
        return NULL;
    char *kind_bytes;
    Py_ssize_t ncols;
    if (PyBytes_AsStringAndSize(kinds, &kind_bytes, &ncols)) return NULL;
    Py_ssize_t rows = PyList_Size(values);
    const int32_t *null_prog;
    Py_ssize_t null_len;
    if (as_program(null_prog_obj, &null_prog, &null_len)) return NULL;
    Col *cols = calloc((size_t)ncols + 1, sizeof *cols);
    Mark *marks = calloc((size_t)ncols + 1, sizeof *marks);
    PyObject *bad = PyList_New(0), *result = NULL;
    Ctx x = {cols, (int)ncols, enums, consts, NULL, 0};
    if (!cols || !marks || !bad) goto fail;
    for (Py_ssize_t i = 0; i < ncols; i++)
        if (col_init(&cols[i], kind_bytes[i], rows)) goto no_memory;
    int64_t last_id = -1;
    const int32_t *last_prog = NULL;
    Py_ssize_t last_len = 0;
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *value = PyList_GetItem(values, row);
        int code = 0;
        for (Py_ssize_t i = 0; i < ncols; i++) col_mark(&cols[i], &marks[i]);
        if (value != Py_None) {
            char *data;
            Py_ssize_t n;
            if (PyBytes_AsStringAndSize(value, &data, &n)) goto fail;
            const uint8_t *d = (const uint8_t *)data;
            if (n < 5 || d[0] != 0) {
                code = E_HEADER;
            } else {
                int64_t id = ((int64_t)d[1] << 24) | (d[2] << 16) | (d[3] << 8) | d[4];
                if (id != last_id) {
                    PyObject *key = PyLong_FromLongLong(id);
                    PyObject *index = key ? PyDict_GetItem(ids, key) : NULL;
                    Py_XDECREF(key);
                    if (!index) {
                        PyErr_Format(PyExc_KeyError, "no program for schema id %lld",
                                     (long long)id);
                        goto fail;
                    }
                    PyObject *prog = PyTuple_GetItem(programs, PyLong_AsSsize_t(index));
                    if (!prog || as_program(prog, &last_prog, &last_len)) goto fail;
                    last_id = id;
                }
                x.prog = last_prog, x.prog_len = last_len;
                In in = {d + 5, d + n};
                code = run(&x, &in, 0, last_len);
            }
        }
        if (value == Py_None || code) {
            if (code) {
                for (Py_ssize_t i = 0; i < ncols; i++) col_rollback(&cols[i], &marks[i]);
                PyObject *entry = Py_BuildValue("(ni)", row, code);
                if (!entry || PyList_Append(bad, entry)) {
                    Py_XDECREF(entry);
                    goto fail;
                }
                Py_DECREF(entry);
            }
            x.prog = null_prog, x.prog_len = null_len;
            In none = {NULL, NULL};
            if (run(&x, &none, 0, null_len)) goto no_memory;
        }
    }
    PyObject *out = PyList_New(ncols);
    if (!out) goto fail;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Col *c = &cols[i];
        PyObject *valid = nulls_of(c) ? bytes_of(&c->valid) : (Py_INCREF(Py_None), Py_None);
        PyObject *a = bytes_of(&c->a);
        PyObject *b = (c->kind == K_BIN || c->kind == K_STR) ? bytes_of(&c->b)
                                                             : (Py_INCREF(Py_None), Py_None);
        PyObject *t = (valid && a && b) ? Py_BuildValue("(NNNL)", valid, a, b, (long long)c->n)
                                        : NULL;
        if (!t) {
            Py_XDECREF(valid), Py_XDECREF(a), Py_XDECREF(b), Py_DECREF(out);
            goto fail;
        }
        PyList_SetItem(out, i, t);
    }
    result = Py_BuildValue("(NO)", out, bad);
    goto done;
no_memory:
    PyErr_NoMemory();
fail:
    result = NULL;
done:
    for (Py_ssize_t i = 0; cols && i < ncols; i++) col_free(&cols[i]);
    free(cols), free(marks);
    Py_XDECREF(bad);
    return result;
}

/* schema_ids(values) -> set of the schema ids of the framed values */
static PyObject *avro_schema_ids(PyObject *self, PyObject *values) {
    (void)self;
    if (!PyList_Check(values)) return PyErr_SetString(PyExc_TypeError, "a list"), NULL;
    PyObject *found = PySet_New(NULL);
    int64_t last = -1;
    for (Py_ssize_t row = 0, rows = PyList_Size(values); found && row < rows; row++) {
        PyObject *value = PyList_GetItem(values, row);
        char *data;
        Py_ssize_t n;
        if (value == Py_None) continue;
        if (PyBytes_AsStringAndSize(value, &data, &n)) return Py_DECREF(found), NULL;
        const uint8_t *d = (const uint8_t *)data;
        if (n < 5 || d[0] != 0) continue;
        int64_t id = ((int64_t)d[1] << 24) | (d[2] << 16) | (d[3] << 8) | d[4];
        if (id == last) continue;
        last = id;
        PyObject *key = PyLong_FromLongLong(id);
        if (!key || PySet_Add(found, key)) return Py_XDECREF(key), Py_DECREF(found), NULL;
        Py_DECREF(key);
    }
    return found;
}

static PyMethodDef methods[] = {
    {"decode", avro_decode, METH_VARARGS, "Decode framed Avro values with compiled programs."},
    {"schema_ids", avro_schema_ids, METH_O, "The schema ids of framed values."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro",
                                    "Avro in Confluent's wire format into Arrow buffers.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__avro(void) { return PyModule_Create(&module); }
