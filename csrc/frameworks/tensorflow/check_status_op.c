/* HvdliteCheckStatus: the TensorFlow op that gives a failed collective its tf.errors class
 * inside a graph.
 *
 * Note [error classes in TensorFlow graphs]: in a graph a collective is a tf.numpy_function,
 * and TensorFlow's py_func kernel turns every Python exception but a few built-in classes
 * into UnknownError (raising a tf.errors class there does not help). So in a graph the
 * numpy function does not raise: it returns its outputs plus a TF_Code and a message, and
 * this op, which follows it, fails with that code and message (a mismatch is then a
 * FailedPreconditionError, as in Horovod and as hvdlite raises it eagerly), or passes the
 * outputs through unchanged.
 *
 * hvdlite never compiles against TensorFlow's headers: the few C API functions used here
 * are declared below, with opaque types, and left undefined in this library. They are
 * resolved when hvdlite.tensorflow loads it (tf.load_op_library) from the libtensorflow_
 * framework.so.2 the process already has. The registration runs when the library is
 * loaded (a constructor), which is when load_op_library collects the ops a library adds.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* From tensorflow/c/tf_status.h, tf_tensor.h, ops.h and kernels.h (stable C API). */
typedef struct TF_Status TF_Status;
typedef struct TF_Tensor TF_Tensor;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;
typedef struct TF_KernelBuilder TF_KernelBuilder;
typedef struct TF_OpKernelConstruction TF_OpKernelConstruction;
typedef struct TF_OpKernelContext TF_OpKernelContext;
typedef int TF_Code; /* an enum in C: int-sized; 0 is TF_OK */
enum { TF_OK = 0, TF_INVALID_ARGUMENT = 3 };

extern TF_Status* TF_NewStatus(void);
extern void TF_DeleteStatus(TF_Status*);
extern void TF_SetStatus(TF_Status*, TF_Code, const char*);
extern TF_Code TF_GetCode(const TF_Status*);

extern void* TF_TensorData(const TF_Tensor*);
extern size_t TF_TensorByteSize(const TF_Tensor*);
extern void TF_DeleteTensor(TF_Tensor*);

extern TF_OpDefinitionBuilder* TF_NewOpDefinitionBuilder(const char* op_name);
extern void TF_OpDefinitionBuilderAddInput(TF_OpDefinitionBuilder*, const char* spec);
extern void TF_OpDefinitionBuilderAddOutput(TF_OpDefinitionBuilder*, const char* spec);
extern void TF_OpDefinitionBuilderAddAttr(TF_OpDefinitionBuilder*, const char* spec);
extern void TF_OpDefinitionBuilderSetIsStateful(TF_OpDefinitionBuilder*, bool);
extern void TF_OpDefinitionBuilderSetShapeInferenceFunction(
    TF_OpDefinitionBuilder*, void (*fn)(TF_ShapeInferenceContext*, TF_Status*));
extern void TF_ShapeInferenceContextSetUnknownShape(TF_ShapeInferenceContext*, TF_Status*);
extern void TF_RegisterOpDefinition(TF_OpDefinitionBuilder*, TF_Status*);

extern TF_KernelBuilder* TF_NewKernelBuilder(
    const char* op_name, const char* device_name,
    void* (*create_func)(TF_OpKernelConstruction*),
    void (*compute_func)(void*, TF_OpKernelContext*), void (*delete_func)(void*));
extern void TF_RegisterKernelBuilder(const char* kernel_name, TF_KernelBuilder*, TF_Status*);
extern int TF_NumOutputs(TF_OpKernelContext*);
extern void TF_GetInput(TF_OpKernelContext*, int i, TF_Tensor** tensor, TF_Status*);
extern void TF_SetOutput(TF_OpKernelContext*, int i, const TF_Tensor* tensor, TF_Status*);
extern void TF_OpKernelContext_Failure(TF_OpKernelContext*, TF_Status*);

#define OP_NAME "HvdliteCheckStatus"
enum { CODE_INPUT = 0, MESSAGE_INPUT = 1, FIRST_PASSED_INPUT = 2 };

static void fail(TF_OpKernelContext* ctx, TF_Status* status, TF_Code code, const char* message) {
  TF_SetStatus(status, code, message);
  TF_OpKernelContext_Failure(ctx, status);
}

/* Fails with the code and message of the collective, read from the op's first two inputs. */
static void fail_with_inputs(TF_OpKernelContext* ctx, TF_Status* status, TF_Code code) {
  TF_Tensor* message = NULL;
  TF_GetInput(ctx, MESSAGE_INPUT, &message, status);
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, status);
    return;
  }
  size_t n = TF_TensorByteSize(message);
  char* text = malloc(n + 1); /* TF_SetStatus takes a NUL-terminated string */
  if (text == NULL) {
    fail(ctx, status, code, "hvdlite: a collective failed (no memory for its message)");
  } else {
    memcpy(text, TF_TensorData(message), n);
    text[n] = '\0';
    fail(ctx, status, code, text);
    free(text);
  }
  TF_DeleteTensor(message);
}

static void compute(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Status* status = TF_NewStatus();
  TF_Tensor* code_tensor = NULL;
  TF_GetInput(ctx, CODE_INPUT, &code_tensor, status);
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteStatus(status);
    return;
  }
  TF_Code code;
  if (TF_TensorByteSize(code_tensor) != sizeof(int32_t)) {
    TF_DeleteTensor(code_tensor);
    fail(ctx, status, TF_INVALID_ARGUMENT, OP_NAME ": code must be an int32 scalar");
    TF_DeleteStatus(status);
    return;
  }
  int32_t value;
  memcpy(&value, TF_TensorData(code_tensor), sizeof value);
  code = value;
  TF_DeleteTensor(code_tensor);
  if (code != TF_OK) {
    fail_with_inputs(ctx, status, code);
    TF_DeleteStatus(status);
    return;
  }
  /* Success: the outputs are the passed inputs (the same buffers, no copy). */
  int n = TF_NumOutputs(ctx);
  for (int i = 0; i < n; ++i) {
    TF_Tensor* tensor = NULL;
    TF_GetInput(ctx, FIRST_PASSED_INPUT + i, &tensor, status);
    if (TF_GetCode(status) == TF_OK) TF_SetOutput(ctx, i, tensor, status);
    TF_DeleteTensor(tensor);
    if (TF_GetCode(status) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, status);
      break;
    }
  }
  TF_DeleteStatus(status);
}

static void* create(TF_OpKernelConstruction* construction) {
  (void)construction;
  return NULL; /* no per-kernel state */
}

static void destroy(void* kernel) { (void)kernel; }

static void unknown_shapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  /* The Python side sets the outputs' static shapes, as it did on the numpy function's. */
  TF_ShapeInferenceContextSetUnknownShape(ctx, status);
}

/* Registration failures leave the op unregistered; hvdlite.tensorflow then finds no op in
 * the loaded library and keeps TensorFlow's UnknownError (with hvdlite's message). */
__attribute__((constructor)) static void register_check_status(void) {
  TF_Status* status = TF_NewStatus();
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder(OP_NAME);
  TF_OpDefinitionBuilderAddInput(op, "code: int32");
  TF_OpDefinitionBuilderAddInput(op, "message: uint8");
  TF_OpDefinitionBuilderAddInput(op, "inputs: T");
  TF_OpDefinitionBuilderAddOutput(op, "outputs: T");
  TF_OpDefinitionBuilderAddAttr(op, "T: list(type) >= 0");
  /* stateful: never constant-folded, merged with another check or pruned by Grappler */
  TF_OpDefinitionBuilderSetIsStateful(op, true);
  TF_OpDefinitionBuilderSetShapeInferenceFunction(op, unknown_shapes);
  TF_RegisterOpDefinition(op, status);
  if (TF_GetCode(status) == TF_OK) {
    TF_KernelBuilder* kernel = TF_NewKernelBuilder(OP_NAME, "CPU", create, compute, destroy);
    TF_RegisterKernelBuilder(OP_NAME, kernel, status);
  }
  TF_DeleteStatus(status);
}
