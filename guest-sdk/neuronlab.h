/*
 * neuronlab.h: the neuronlab guest ABI, version 1.10, for C guests.
 *
 * guest-sdk/ABI.md is the contract; this header declares it for clang's wasm32 target:
 *
 *   clang --target=wasm32 -O2 -ffreestanding -nostdlib -mbulk-memory \
 *         -Wl,--no-entry -o guest.wasm guest.c
 *
 * It needs no libc: only <stdint.h> and <stddef.h>, which clang provides freestanding, and
 * memory.copy (-mbulk-memory) for the attribute helpers' copies. A guest:
 *
 *   - exports its memory (wasm-ld does by default) and `neuronlab_abi_version`, which
 *     NEURONLAB_DEFINE_ABI_VERSION() defines;
 *   - exports its entry points, such as `run`, with NL_EXPORT("run");
 *   - calls the nl_* imports below. Each returns a value >= 0 on success and a negative
 *     NL_ERR_* code on failure; nl_last_error() then gives the message.
 *
 * Tensors live on the host; the guest holds handles (positive int32_t values) and frees each
 * with nl_tensor_drop().
 */
#ifndef NEURONLAB_H
#define NEURONLAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version --------------------------------------------------------------------------- */

/** The ABI version this header speaks: (major << 16) | minor. */
#define NL_ABI_VERSION ((1 << 16) | 10)

/** Exports a function from the module under `name`. */
#define NL_EXPORT(name) __attribute__((export_name(name)))

/** Defines the `neuronlab_abi_version` export the host checks before it runs the guest. */
#define NEURONLAB_DEFINE_ABI_VERSION()                                                         \
    NL_EXPORT("neuronlab_abi_version") int32_t neuronlab_abi_version(void) {                   \
        return NL_ABI_VERSION;                                                                 \
    }

/* ---- Error codes (ABI.md, "Error codes") ----------------------------------------------- */

#define NL_ERR_INVALID (-1)     /* a bad argument */
#define NL_ERR_HANDLE (-2)      /* a handle that is 0, freed, stale or foreign */
#define NL_ERR_BOUNDS (-3)      /* a (ptr, len) range outside guest memory */
#define NL_ERR_OP (-4)          /* the op rejected its operands or attributes */
#define NL_ERR_MEMORY (-5)      /* over the tensor quota, the core's HBM or the host cap */
#define NL_ERR_UNKNOWN_OP (-6)  /* no op has this name or id */
#define NL_ERR_CANCELLED (-7)   /* interrupted (Ctrl-C, a Jupyter interrupt, the deadline) */
#define NL_ERR_TOO_SMALL (-8)   /* the output buffer is smaller than the data */
#define NL_ERR_UNAVAILABLE (-9) /* known, but not available here */
#define NL_ERR_COLLECTIVE (-10) /* a collective failed across ranks (disagreement, timeout) */
#define NL_ERR_GRAD (-11)       /* autograd refused (ABI 1.4) */
#define NL_ERR_FS (-12)         /* a file access refused or failed (ABI 1.5) */

/** The name of an error code, such as "ERR_OP"; "ERR_OTHER" for an unknown code. */
static inline const char *nl_error_name(int32_t code) {
    switch (code) {
    case NL_ERR_INVALID: return "ERR_INVALID";
    case NL_ERR_HANDLE: return "ERR_HANDLE";
    case NL_ERR_BOUNDS: return "ERR_BOUNDS";
    case NL_ERR_OP: return "ERR_OP";
    case NL_ERR_MEMORY: return "ERR_MEMORY";
    case NL_ERR_UNKNOWN_OP: return "ERR_UNKNOWN_OP";
    case NL_ERR_CANCELLED: return "ERR_CANCELLED";
    case NL_ERR_TOO_SMALL: return "ERR_TOO_SMALL";
    case NL_ERR_UNAVAILABLE: return "ERR_UNAVAILABLE";
    case NL_ERR_COLLECTIVE: return "ERR_COLLECTIVE";
    case NL_ERR_GRAD: return "ERR_GRAD";
    case NL_ERR_FS: return "ERR_FS";
    default: return "ERR_OTHER";
    }
}

/* ---- Dtype codes ----------------------------------------------------------------------- */

#define NL_F32 0  /* float */
#define NL_BF16 1 /* bfloat16, as its 16-bit pattern */
#define NL_F16 2  /* IEEE half, as its 16-bit pattern */
#define NL_F64 3  /* double */
#define NL_I64 4  /* int64_t */
#define NL_I32 5  /* int32_t */
#define NL_U8 6   /* uint8_t */
#define NL_BOOL 7 /* one byte per element, 0 or 1 */

/* ---- Output streams for nl_print ------------------------------------------------------- */

#define NL_STDOUT 1
#define NL_STDERR 2

/* ---- Imports --------------------------------------------------------------------------- */

#define NL_IMPORT(name) __attribute__((import_module("neuronlab"), import_name(name)))

/* sys */

/** Copies up to `cap` bytes of the last error message to `ptr`; returns its full length. */
NL_IMPORT("last_error") int32_t nl_last_error(char *ptr, int32_t cap);
/** Writes UTF-8 text to the cell's stdout (NL_STDOUT) or stderr (NL_STDERR); returns 0. */
NL_IMPORT("print") int32_t nl_print(int32_t stream, const char *ptr, int32_t len);
/** Shows rich output of a MIME type (text/html, image/svg+xml, ...); returns 0. */
/* A few MIME types of ours are requests, not content (ABI.md, "sys"): the next display's
 * display id or update, clear output, and plot specs (application/vnd.neuronlab.plot+json). */
NL_IMPORT("display")
int32_t nl_display(const char *mime_ptr, int32_t mime_len, const void *data_ptr, int32_t data_len);
/** Nanoseconds of host monotonic time since the instance started. */
NL_IMPORT("clock_ns") int64_t nl_clock_ns(void);
/** ABI 1.5: the run's arguments (after `--`) as a string list, capped; returns its length. */
NL_IMPORT("args") int32_t nl_args(void *ptr, int32_t cap);
/** ABI 1.6: nanoseconds of modeled device time of the ops and collectives run on the guest's
 * core since the instance started (what their events carry). */
NL_IMPORT("device_time_ns") int64_t nl_device_time_ns(void);
/** ABI 1.7: records the failure the guest is about to stop with (call abort() next): a name
 * such as "Panic" or "OpError", a message, and FILE:LINE:COLUMN or an empty location. */
NL_IMPORT("fail")
int32_t nl_fail(const char *name, int32_t name_len, const char *msg, int32_t msg_len,
                const char *at, int32_t at_len);
/** ABI 1.8: the part of nl_device_time_ns spent in collectives, nanoseconds. */
NL_IMPORT("collective_time_ns") int64_t nl_collective_time_ns(void);
/** ABI 1.8: one NeuronCore's peak TensorEngine FLOP/s for a dtype code, or a negative error
 * code. */
NL_IMPORT("peak_flops") int64_t nl_peak_flops(int32_t dtype);
/** ABI 1.10: the part of nl_device_time_ns that is communication overlapping no compute. */
NL_IMPORT("collective_exposed_ns") int64_t nl_collective_exposed_ns(void);
/** ABI 1.10: bytes of a memory role (0 parameters, 1 gradients, 2 optimizer state,
 * 3 activations, 4 collective buffers, 5 other) on this core at its peak. */
NL_IMPORT("memory_at_peak") int64_t nl_memory_at_peak(int32_t role);
/** ABI 1.10: starts this core's peak again from what it holds now; returns 0. */
NL_IMPORT("memory_reset_peak") int32_t nl_memory_reset_peak(void);

/* tensor */

/** A new tensor from dense row-major data; `data_len` must be numel * dtype size. */
NL_IMPORT("tensor_create")
int32_t nl_tensor_create(int32_t dtype, const int64_t *shape, int32_t rank, const void *data,
                         int32_t data_len);
/** The dtype code. */
NL_IMPORT("tensor_dtype") int32_t nl_tensor_dtype(int32_t h);
/** The number of dims. */
NL_IMPORT("tensor_rank") int32_t nl_tensor_rank(int32_t h);
/** Writes up to `cap` dims at `out`; returns the rank. */
NL_IMPORT("tensor_shape") int32_t nl_tensor_shape(int32_t h, int64_t *out, int32_t cap);
/** The number of elements. */
NL_IMPORT("tensor_numel") int64_t nl_tensor_numel(int32_t h);
/** The size of the dense data in bytes. */
NL_IMPORT("tensor_nbytes") int64_t nl_tensor_nbytes(int32_t h);
/** Copies the dense row-major data; NL_ERR_TOO_SMALL when `len` < nbytes. */
NL_IMPORT("tensor_read") int32_t nl_tensor_read(int32_t h, void *ptr, int32_t len);
/** Copies up to `cap` bytes of the numpy-style text; returns its full length. */
NL_IMPORT("tensor_format") int32_t nl_tensor_format(int32_t h, char *ptr, int32_t cap);
/** Shows the tensor richly (an HTML table in notebooks, text in the REPL); returns 0. */
NL_IMPORT("tensor_display") int32_t nl_tensor_display(int32_t h);
/** The index of the core the tensor lives on (neuron:N). */
NL_IMPORT("tensor_device") int32_t nl_tensor_device(int32_t h);
/** A new handle to the same tensor (no copy). */
NL_IMPORT("tensor_clone") int32_t nl_tensor_clone(int32_t h);
/** Frees a handle; returns 0. */
NL_IMPORT("tensor_drop") int32_t nl_tensor_drop(int32_t h);
/** ABI 1.10: counts the tensor's storage as a memory role (see nl_memory_at_peak). */
NL_IMPORT("tensor_set_memory_role") int32_t nl_tensor_set_memory_role(int32_t h, int32_t role);

/* op */

/** An op's id by name (stable for the host process). */
NL_IMPORT("op_lookup") int32_t nl_op_lookup(const char *name, int32_t name_len);
/**
 * Runs op `id` on `n_inputs` handles with `attrs_len` bytes of encoded attributes, writes up
 * to `max_outputs` output handles to `outputs` and returns how many it wrote.
 */
NL_IMPORT("op_call")
int32_t nl_op_call(int32_t id, const int32_t *inputs, int32_t n_inputs, const void *attrs,
                   int32_t attrs_len, int32_t *outputs, int32_t max_outputs);

/* compile (ABI 1.1): a guest that compiles functions also exports
 * int32_t neuronlab_trampoline(int32_t fn_index, int32_t n_args); see ABI.md. */
NL_IMPORT("compile_fn")
int32_t nl_compile_fn(int32_t fn_index, const char *name, int32_t name_len, const void *attrs,
                      int32_t attrs_len);
NL_IMPORT("compile_call")
int32_t nl_compile_call(int32_t f, const int32_t *inputs, int32_t n_inputs, int32_t *outputs,
                        int32_t max_outputs);
NL_IMPORT("compile_arg") int32_t nl_compile_arg(int32_t i);
NL_IMPORT("compile_result") int32_t nl_compile_result(int32_t h);
NL_IMPORT("compile_explain") int32_t nl_compile_explain(int32_t f, char *ptr, int32_t cap);
/* ABI 1.3: calls, compiles, cache hits and eager calls, as four int64_t at out. */
NL_IMPORT("compile_stats") int32_t nl_compile_stats(int32_t f, int64_t *out);
NL_IMPORT("lazy_begin") int32_t nl_lazy_begin(void);
NL_IMPORT("lazy_sync") int32_t nl_lazy_sync(void);
NL_IMPORT("lazy_end") int32_t nl_lazy_end(void);

/* dist (ABI 1.2): ranks, process groups, collectives, a device mesh and distributed tensors.
 * Groups, meshes and distributed tensors are handles freed with nl_tensor_drop(); group 0 is
 * the world. Placements are a comma-separated string, one per mesh dim, as torch prints them:
 * "Shard(0),Replicate()", "Partial(sum)". See ABI.md, "dist". */

/** This instance's rank in the world. */
NL_IMPORT("dist_rank") int32_t nl_dist_rank(void);
/** The number of ranks in the world. */
NL_IMPORT("dist_world_size") int32_t nl_dist_world_size(void);
/** A group handle for the `n` global ranks at `ranks`, in ring order. */
NL_IMPORT("dist_new_group") int32_t nl_dist_new_group(const uint32_t *ranks, int32_t n);
/** The number of ranks in a group. */
NL_IMPORT("dist_group_size") int32_t nl_dist_group_size(int32_t group);
/** This rank's position in a group; NL_ERR_INVALID when it is not a member. */
NL_IMPORT("dist_group_rank") int32_t nl_dist_group_rank(int32_t group);
/**
 * Runs the collective named `op` ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
 * "broadcast") on tensor `h` over `group`, with `attrs_len` bytes of encoded attributes;
 * returns a handle to this rank's result.
 */
NL_IMPORT("dist_collective")
int32_t nl_dist_collective(const char *op, int32_t op_len, int32_t group, int32_t h,
                           const void *attrs, int32_t attrs_len);
/** Returns 0 once every rank of the group has reached the barrier. */
NL_IMPORT("dist_barrier") int32_t nl_dist_barrier(int32_t group);
/** A mesh handle: the world's ranks as arange(world).reshape(shape), names comma-separated. */
NL_IMPORT("dist_mesh_new")
int32_t nl_dist_mesh_new(const int64_t *shape, int32_t ndim, const char *names,
                         int32_t names_len);
/** A group handle: this rank's group along the named mesh dim. */
NL_IMPORT("dist_mesh_group")
int32_t nl_dist_mesh_group(int32_t mesh, const char *name, int32_t name_len);
/** This rank's coordinate along the named mesh dim. */
NL_IMPORT("dist_mesh_coord")
int32_t nl_dist_mesh_coord(int32_t mesh, const char *name, int32_t name_len);
/** A distributed-tensor handle: every rank passes the whole tensor and keeps its shard. */
NL_IMPORT("dist_distribute")
int32_t nl_dist_distribute(int32_t mesh, int32_t h, const char *placements,
                           int32_t placements_len);
/** A distributed-tensor handle wrapping this rank's local tensor, without communication. */
NL_IMPORT("dist_from_local")
int32_t nl_dist_from_local(int32_t mesh, int32_t h, const char *placements,
                           int32_t placements_len);
/** A new distributed-tensor handle with the target placements. */
NL_IMPORT("dist_redistribute")
int32_t nl_dist_redistribute(int32_t dt, const char *placements, int32_t placements_len);
/** A tensor handle: the whole (replicated) tensor. */
NL_IMPORT("dist_full_tensor") int32_t nl_dist_full_tensor(int32_t dt);
/** A tensor handle: this rank's local shard, without communication. */
NL_IMPORT("dist_to_local") int32_t nl_dist_to_local(int32_t dt);
/** Copies up to `cap` bytes of a group's, mesh's or distributed tensor's description. */
NL_IMPORT("dist_describe") int32_t nl_dist_describe(int32_t h, char *ptr, int32_t cap);

/* vars (ABI 1.2): session variables, which later cells of a notebook or REPL read. Names are
 * Rust identifiers. */

/** The variable `name` now refers to the tensor behind `h` (the handle stays yours); 0. */
NL_IMPORT("var_set_tensor")
int32_t nl_var_set_tensor(const char *name, int32_t name_len, int32_t h);
/** A new handle to the tensor of variable `name`. */
NL_IMPORT("var_get_tensor") int32_t nl_var_get_tensor(const char *name, int32_t name_len);
/** Sets a plain value (kind 1, payload "<type>\n<text>") or a cell-local one (kind 0, payload
 * its type name); 0. */
NL_IMPORT("var_set_value")
int32_t nl_var_set_value(const char *name, int32_t name_len, int32_t kind, const char *ptr,
                         int32_t len);
/** Copies up to `cap` bytes of the plain value's "<type>\n<text>"; returns its full length. */
NL_IMPORT("var_get_value")
int32_t nl_var_get_value(const char *name, int32_t name_len, char *ptr, int32_t cap);

/* grad (ABI 1.4): autograd. */
/** Marks the tensor as a leaf that requires a gradient; 0. */
NL_IMPORT("grad_requires") int32_t nl_grad_requires(int32_t h);
/** 1 when the tensor requires a gradient, else 0. */
NL_IMPORT("grad_is_required") int32_t nl_grad_is_required(int32_t h);
/** Adds the gradients of h (grad_h its gradient, or 0 for a one-element h) into the leaves. */
NL_IMPORT("grad_backward") int32_t nl_grad_backward(int32_t h, int32_t grad_h, int32_t retain_graph);
/** A new handle to the leaf's gradient, or 0 when it has none. */
NL_IMPORT("grad_get") int32_t nl_grad_get(int32_t h);
/** Sets the leaf's gradient to grad_h's tensor, or clears it for grad_h 0; 0. */
NL_IMPORT("grad_set") int32_t nl_grad_set(int32_t h, int32_t grad_h);
/** A new handle to the same data outside the graph. */
NL_IMPORT("grad_detach") int32_t nl_grad_detach(int32_t h);
/** Turns recording on or off; returns the previous mode. */
NL_IMPORT("grad_set_enabled") int32_t nl_grad_set_enabled(int32_t enabled);
/** The gradients of the outputs with respect to each input, as new handles at results. */
NL_IMPORT("grad_compute")
int32_t nl_grad_compute(const int32_t *outputs, int32_t n_outputs, const int32_t *grads,
                        const int32_t *inputs, int32_t n_inputs, int32_t *results,
                        int32_t retain_graph);
/** Replaces h's data with data_h's, keeping its leaf; 0. */
NL_IMPORT("grad_assign") int32_t nl_grad_assign(int32_t h, int32_t data_h);

/* fs (ABI 1.5): files in the folders the user granted, addressed as NAME/relative/path.
 * fs_list writes a string list: a uint32_t count, then each name as a uint32_t length and
 * its bytes. */
/** The file's size in bytes. */
NL_IMPORT("fs_size") int64_t nl_fs_size(const char *path, int32_t path_len);
/** Reads up to len bytes from byte offset into ptr; returns how many were read. */
NL_IMPORT("fs_read")
int32_t nl_fs_read(const char *path, int32_t path_len, int64_t offset, void *ptr, int32_t len);
/** Writes len bytes to the file, replacing its contents (append 0) or after them (1). */
NL_IMPORT("fs_write")
int32_t nl_fs_write(const char *path, int32_t path_len, const void *data, int32_t len,
                    int32_t append);
/** The folder's entries as a string list (capped); the empty path lists the grants. */
NL_IMPORT("fs_list")
int32_t nl_fs_list(const char *path, int32_t path_len, void *ptr, int32_t cap);
/** Makes a folder in a read-write grant; 0 when it exists already. */
NL_IMPORT("fs_mkdir") int32_t nl_fs_mkdir(const char *path, int32_t path_len);

/* ckpt (ABI 1.5): safetensors checkpoints (a file, or a sharded folder with an index) in the
 * granted folders. */
/** Two string lists, capped: the tensor names (sorted), then the metadata as key, value. */
NL_IMPORT("ckpt_info")
int32_t nl_ckpt_info(const char *path, int32_t path_len, void *ptr, int32_t cap);
/** Loads every tensor onto the guest's core; writes a handle each (ckpt_info's order). */
NL_IMPORT("ckpt_load")
int32_t nl_ckpt_load(const char *path, int32_t path_len, int32_t *handles, int32_t max);
/** Saves n tensors named by the string lists at names (names, then metadata pairs); one
 * file for shard_bytes 0, else a sharded folder. Returns the files written. */
NL_IMPORT("ckpt_save")
int32_t nl_ckpt_save(const char *path, int32_t path_len, const void *names, int32_t names_len,
                     const int32_t *handles, int32_t n, int64_t shard_bytes);

/* tok (ABI 1.6): Hugging Face tokenizers, loaded from a tokenizer.json in a granted folder.
 * A tokenizer is a handle, freed with nl_tok_free; ids are int64_t. */
/** A tokenizer handle for the tokenizer.json at path. */
NL_IMPORT("tok_load") int32_t nl_tok_load(const char *path, int32_t path_len);
/** The number of ids text encodes to, after writing up to cap of them at ids. */
NL_IMPORT("tok_encode")
int32_t nl_tok_encode(int32_t t, const char *text, int32_t text_len, int32_t add_special_tokens,
                      int64_t *ids, int32_t cap);
/** The length of the UTF-8 text n_ids ids decode to, after copying up to cap bytes of it. */
NL_IMPORT("tok_decode")
int32_t nl_tok_decode(int32_t t, const int64_t *ids, int32_t n_ids, int32_t skip_special_tokens,
                      char *ptr, int32_t cap);
/** 1 after writing the token's id at id, 0 when the vocabulary has no such token. */
NL_IMPORT("tok_token_to_id")
int32_t nl_tok_token_to_id(int32_t t, const char *token, int32_t token_len, int64_t *id);
/** The vocabulary's size, added tokens included. */
NL_IMPORT("tok_vocab_size") int32_t nl_tok_vocab_size(int32_t t);
/** Frees a tokenizer handle. */
NL_IMPORT("tok_free") int32_t nl_tok_free(int32_t t);

#undef NL_IMPORT

/* ---- Strings --------------------------------------------------------------------------- */

/** The length of a NUL-terminated string. */
static inline int32_t nl_strlen(const char *s) {
    int32_t n = 0;
    while (s[n] != '\0') {
        n++;
    }
    return n;
}

/** Writes a NUL-terminated string to a stream. */
static inline int32_t nl_puts(int32_t stream, const char *s) {
    return nl_print(stream, s, nl_strlen(s));
}

/** Looks an op up by its NUL-terminated name. */
static inline int32_t nl_op(const char *name) { return nl_op_lookup(name, nl_strlen(name)); }

/* ---- Attribute encoding (ABI.md, "Attribute encoding") ---------------------------------- */

#define NL_ATTR_INT 1    /* payload: i64 */
#define NL_ATTR_FLOAT 2  /* payload: f64 */
#define NL_ATTR_INTS 3   /* payload: u32 count, then count i64s */
#define NL_ATTR_STRING 4 /* payload: u32 length, then UTF-8 bytes */

/**
 * A buffer that attribute entries are appended to, back to back. Pass `buf` and `len` to
 * nl_op_call. An append that does not fit (or a name longer than 255 bytes) leaves the
 * buffer unchanged and returns NL_ERR_TOO_SMALL (NL_ERR_INVALID for the name); `failed` then
 * stays set, so a guest can check once after building.
 */
typedef struct {
    uint8_t *buf;
    int32_t cap;
    int32_t len;
    int32_t failed;
} nl_attrs;

/** An empty attribute list over `cap` bytes at `buf`. */
static inline nl_attrs nl_attrs_init(void *buf, int32_t cap) {
    nl_attrs a = {(uint8_t *)buf, cap, 0, 0};
    return a;
}

/* Appends one entry: `kind name_len name`, then `head` (the fixed part of the payload) and
 * `payload_len` bytes of `payload` (the variable part, if any). Not part of the API. */
static inline int32_t nl__attrs_entry(nl_attrs *a, uint8_t kind, const char *name,
                                      const void *head, int32_t head_len, const void *payload,
                                      int32_t payload_len) {
    int32_t name_len = nl_strlen(name);
    if (name_len > 255) {
        a->failed = NL_ERR_INVALID;
        return NL_ERR_INVALID;
    }
    int64_t need = 2 + (int64_t)name_len + head_len + payload_len;
    if (need > (int64_t)a->cap - a->len) {
        a->failed = NL_ERR_TOO_SMALL;
        return NL_ERR_TOO_SMALL;
    }
    uint8_t *p = a->buf + a->len;
    *p++ = kind;
    *p++ = (uint8_t)name_len;
    __builtin_memcpy(p, name, (size_t)name_len);
    p += name_len;
    __builtin_memcpy(p, head, (size_t)head_len);
    p += head_len;
    if (payload_len > 0) {
        __builtin_memcpy(p, payload, (size_t)payload_len);
    }
    a->len += (int32_t)need;
    return 0;
}

/* wasm32 is little-endian, as the encoding is: values are copied as they are in memory. */

/** Appends an int attribute. The host also accepts an int where a float or list is expected. */
static inline int32_t nl_attrs_int(nl_attrs *a, const char *name, int64_t value) {
    return nl__attrs_entry(a, NL_ATTR_INT, name, &value, 8, NULL, 0);
}

/** Appends a float attribute. */
static inline int32_t nl_attrs_float(nl_attrs *a, const char *name, double value) {
    return nl__attrs_entry(a, NL_ATTR_FLOAT, name, &value, 8, NULL, 0);
}

/** Appends an int list attribute of `count` values. */
static inline int32_t nl_attrs_ints(nl_attrs *a, const char *name, const int64_t *values,
                                    uint32_t count) {
    if (count > (uint32_t)(INT32_MAX / 8)) {
        a->failed = NL_ERR_TOO_SMALL;
        return NL_ERR_TOO_SMALL;
    }
    return nl__attrs_entry(a, NL_ATTR_INTS, name, &count, 4, values, (int32_t)(count * 8));
}

/** Appends a string attribute (NUL-terminated UTF-8); dtypes are passed by name ("bf16"). */
static inline int32_t nl_attrs_str(nl_attrs *a, const char *name, const char *value) {
    uint32_t len = (uint32_t)nl_strlen(value);
    return nl__attrs_entry(a, NL_ATTR_STRING, name, &len, 4, value, (int32_t)len);
}

#ifdef __cplusplus
}
#endif

#endif /* NEURONLAB_H */
