/*
 * hello.c: a neuronlab guest in C. It makes two tensors, multiplies them, adds a bias with
 * broadcasting, takes a softmax along dim 0, prints each result as numpy would, and prints
 * the error the host reports for a matmul of mismatched shapes.
 *
 * Build with ./build.sh; the module exports memory, neuronlab_abi_version and run.
 */
#include "neuronlab.h"

NEURONLAB_DEFINE_ABI_VERSION()

/* Formatted tensors and messages are read into this buffer (the guest has no allocator). */
static char text[1 << 16];

/* Variable-size text is read in two steps: a call with an empty buffer returns the full
 * length, and a second call with a buffer that large reads it. Both return the length, or
 * NL_ERR_TOO_SMALL when the text does not fit in `text`. */

static int32_t format_tensor(int32_t h) {
    int32_t len = nl_tensor_format(h, NULL, 0);
    if (len < 0 || len > (int32_t)sizeof text) {
        return len < 0 ? len : NL_ERR_TOO_SMALL;
    }
    return nl_tensor_format(h, text, len);
}

static int32_t last_error(void) {
    int32_t len = nl_last_error(NULL, 0);
    if (len > (int32_t)sizeof text) {
        return NL_ERR_TOO_SMALL;
    }
    return nl_last_error(text, len);
}

/* Prints `label: ERR_NAME: message` for a failed call's status. */
static void print_error(int32_t stream, const char *label, int32_t status) {
    int32_t len = last_error();
    nl_puts(stream, label);
    nl_puts(stream, ": ");
    nl_puts(stream, nl_error_name(status));
    nl_puts(stream, ": ");
    if (len >= 0) {
        nl_print(stream, text, len);
    }
    nl_puts(stream, "\n");
}

/* Stops the guest after reporting a failed call; the host reports the trap. */
static void fail(const char *what, int32_t status) {
    print_error(NL_STDERR, what, status);
    __builtin_trap();
}

static int32_t check(const char *what, int32_t status) {
    if (status < 0) {
        fail(what, status);
    }
    return status;
}

/* Prints `label =`, then the tensor's numpy-style text. */
static void print_tensor(const char *label, int32_t h) {
    int32_t len = check("tensor_format", format_tensor(h));
    nl_puts(NL_STDOUT, label);
    nl_puts(NL_STDOUT, " =\n");
    nl_print(NL_STDOUT, text, len);
    nl_puts(NL_STDOUT, "\n");
}

/* Runs a one-output op; returns its output handle or a negative error code. */
static int32_t call1(int32_t op, const int32_t *inputs, int32_t n_inputs, const nl_attrs *attrs) {
    int32_t out = 0;
    int32_t n = nl_op_call(op, inputs, n_inputs, attrs ? attrs->buf : NULL,
                           attrs ? attrs->len : 0, &out, 1);
    return n < 0 ? n : out;
}

NL_EXPORT("run") void run(void) {
    int32_t matmul = check("op_lookup(matmul)", nl_op("matmul"));
    int32_t add = check("op_lookup(add)", nl_op("add"));
    int32_t softmax = check("op_lookup(softmax)", nl_op("softmax"));

    /* a = arange(6).reshape(2, 3), b = arange(6).reshape(3, 2), bias = [10, 20] */
    static const float a_data[6] = {0, 1, 2, 3, 4, 5};
    static const float bias_data[2] = {10, 20};
    static const int64_t a_shape[2] = {2, 3};
    static const int64_t b_shape[2] = {3, 2};
    static const int64_t bias_shape[1] = {2};
    int32_t a = check("tensor_create(a)", nl_tensor_create(NL_F32, a_shape, 2, a_data, sizeof a_data));
    int32_t b = check("tensor_create(b)", nl_tensor_create(NL_F32, b_shape, 2, a_data, sizeof a_data));
    int32_t bias =
        check("tensor_create(bias)", nl_tensor_create(NL_F32, bias_shape, 1, bias_data, sizeof bias_data));
    print_tensor("a", a);

    int32_t ab[2] = {a, b};
    int32_t c = check("matmul", call1(matmul, ab, 2, NULL));
    print_tensor("a @ b", c);

    int32_t c_bias[2] = {c, bias};
    int32_t d = check("add", call1(add, c_bias, 2, NULL));
    print_tensor("a @ b + bias", d);

    uint8_t attr_buf[32];
    nl_attrs attrs = nl_attrs_init(attr_buf, sizeof attr_buf);
    nl_attrs_int(&attrs, "dim", 0);
    check("attrs", attrs.failed);
    int32_t s = check("softmax", call1(softmax, &d, 1, &attrs));
    print_tensor("softmax(a @ b + bias, dim=0)", s);

    /* [2, 3] @ [2, 3] does not line up: the host says why, and nothing is created. */
    int32_t aa[2] = {a, a};
    int32_t bad = call1(matmul, aa, 2, NULL);
    if (bad < 0) {
        print_error(NL_STDOUT, "caught", bad);
    } else {
        nl_tensor_drop(bad);
    }

    int32_t handles[6] = {a, b, bias, c, d, s};
    for (int i = 0; i < 6; i++) {
        nl_tensor_drop(handles[i]);
    }
}
