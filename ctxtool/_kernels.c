/* ctxtool._kernels: optional compiled kernels, each with the contract of a pure-Python function that is
 * always there and always tested (ctxtool.common.kernels picks one; CTXTOOL_PURE=1 forces Python).
 *
 * invalid_utf8(data, first_line=1) -> (lines, first): ctxtool.session.utf8.invalid_utf8_pure. A line (split
 * on b"\n") is invalid when bytes.decode("utf-8") would raise on it: CPython's strict UTF-8, which refuses
 * overlong forms, surrogates (U+D800..U+DFFF), code points above U+10FFFF and a sequence cut short.
 * Checking a session that way in Python builds no string but still decodes every non-ASCII chunk; here
 * ASCII goes 32 bytes at a time and the rest through the table of Unicode 15 §3.9 (Table 3-7).
 *
 * utf16_counts(text) -> (units, ascii): ctxtool.common.jsvalue.utf16_counts_pure, the counts Gemini CLI's
 * token estimate takes of a text that is not all ASCII (ctxtool.measure.estimator.estimate_text); Python
 * takes them with two encodings, one of them through an error handler.
 *
 * Plain C against the limited API of Python 3.11 (one abi3 wheel per platform); nothing is allocated but
 * utf16_counts' UTF-8 copy of its text.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HIGH_BITS 0x8080808080808080ULL

/* The offset of the first byte of the first ill-formed sequence in s[start:end], or -1 when none. */
static Py_ssize_t
first_invalid(const unsigned char *s, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t i = start;
    for (;;) {
        /* Most of a session is ASCII (JSON syntax, code, English): four words at a time, then one. */
        while (end - i >= 32) {
            uint64_t a, b, c, d;
            memcpy(&a, s + i, 8);
            memcpy(&b, s + i + 8, 8);
            memcpy(&c, s + i + 16, 8);
            memcpy(&d, s + i + 24, 8);
            if ((a | b | c | d) & HIGH_BITS) {
                break;
            }
            i += 32;
        }
        while (end - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & HIGH_BITS) {
                break;
            }
            i += 8;
        }
        if (i >= end) {
            return -1;
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i += 1;
            continue;
        }
        /* Table 3-7: the lead byte fixes the length and the range of the second byte. */
        unsigned char lo = 0x80, hi = 0xBF;
        Py_ssize_t len;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) {
                lo = 0xA0; /* overlong */
            }
            else if (c == 0xED) {
                hi = 0x9F; /* surrogates */
            }
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) {
                lo = 0x90; /* overlong */
            }
            else if (c == 0xF4) {
                hi = 0x8F; /* above U+10FFFF */
            }
        }
        else {
            return i; /* a continuation byte, C0, C1 or F5..FF */
        }
        if (end - i < len || s[i + 1] < lo || s[i + 1] > hi) {
            return i;
        }
        for (Py_ssize_t k = 2; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return i;
            }
        }
        i += len;
    }
}

static Py_ssize_t
count_newlines(const unsigned char *s, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t n = 0;
    const unsigned char *p = s + start, *stop = s + end;
    while ((p = memchr(p, '\n', (size_t)(stop - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

static PyObject *
invalid_utf8(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "invalid_utf8(data, first_line=1) takes 1 or 2 arguments");
        return NULL;
    }
    Py_ssize_t line = 1; /* the number of the first line */
    if (nargs == 2) {
        line = PyLong_AsSsize_t(args[1]);
        if (line == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0, count = 0, first = 0;
    for (;;) {
        Py_ssize_t bad = first_invalid(s, pos, n);
        if (bad < 0) {
            break;
        }
        /* An ill-formed sequence never spans a newline (b"\n" is no continuation byte): bad is in the
         * line the Python function finds invalid. Count that line and go on from the next one. */
        if (count++ == 0) {
            first = line + count_newlines(s, 0, bad);
        }
        const unsigned char *nl = memchr(s + bad, '\n', (size_t)(n - bad));
        if (nl == NULL) {
            break;
        }
        pos = (Py_ssize_t)(nl - s) + 1;
    }
    PyBuffer_Release(&view);
    if (count == 0) {
        return Py_BuildValue("(nO)", (Py_ssize_t)0, Py_None);
    }
    return Py_BuildValue("(nn)", count, first);
}

/* utf16_counts(text) -> (units, ascii): the UTF-16 code units of a str (JavaScript's ``length``: an astral
 * character counts 2, a lone surrogate 1) and how many of its characters are ASCII, as
 * ``ctxtool.common.jsvalue.utf16_counts_pure`` counts them. The str is encoded to UTF-8 (lone surrogates
 * passed through as three bytes), a copy freed here: each byte below 0x80 is an ASCII character, and each
 * lead byte from 0xF0 an astral one, which is two units to the one unit of any other character. */
static PyObject *
utf16_counts(PyObject *module, PyObject *text)
{
    (void)module;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "utf16_counts(text) takes a str");
        return NULL;
    }
    Py_ssize_t length = PyUnicode_GetLength(text);
    if (length < 0) {
        return NULL;
    }
    PyObject *encoded = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
    if (encoded == NULL) {
        return NULL;
    }
    char *data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(encoded, &data, &size) < 0) {
        Py_DECREF(encoded);
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)data;
    Py_ssize_t high = 0, astral = 0, i = 0;
    /* Eight bytes at a time: the bytes with their high bit set (not ASCII), and those with their four high
     * bits set (from 0xF0: a lead byte of four), each marked by its high bit and summed by a multiply. */
    for (; size - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        high += (Py_ssize_t)((((w & HIGH_BITS) >> 7) * 0x0101010101010101ULL) >> 56);
        astral += (Py_ssize_t)((((w & (w << 1) & (w << 2) & (w << 3) & HIGH_BITS) >> 7) * 0x0101010101010101ULL) >> 56);
    }
    for (; i < size; i++) {
        high += p[i] >= 0x80;
        astral += p[i] >= 0xF0;
    }
    Py_ssize_t ascii = size - high;
    Py_DECREF(encoded);
    return Py_BuildValue("(nn)", length + astral, ascii);
}

static PyMethodDef methods[] = {
    {"utf16_counts", (PyCFunction)utf16_counts, METH_O,
     "utf16_counts(text) -> (units, ascii): the UTF-16 code units of text (an astral character counts 2, a "
     "lone surrogate 1) and how many of its characters are ASCII."},
    {"invalid_utf8", (PyCFunction)(void (*)(void))invalid_utf8, METH_FASTCALL,
     "invalid_utf8(data, first_line=1) -> (lines, first): the lines of data (split on b'\\n') that are not "
     "UTF-8, and the number of the first (None when none); first_line numbers the first line."},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    /* The kernels this build holds, as ``ctxtool --version`` names them. */
    PyObject *names = Py_BuildValue("(ss)", "utf8", "utf16");
    if (names == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, "KERNELS", names) < 0) {
        Py_DECREF(names);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, (void *)exec_module},
    {0, NULL},
};

static struct PyModuleDef kernels_module = {
    PyModuleDef_HEAD_INIT,
    "ctxtool._kernels",
    "Optional compiled kernels of ctxtool; see ctxtool.common.kernels.",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    return PyModuleDef_Init(&kernels_module);
}
