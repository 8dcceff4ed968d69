/* An MPI plugin: the HvdliteMpiApi table (api.h) over one MPI ABI family, Note [one wheel, any
 * MPI]. The same file is compiled once per family, against that family's header:
 *   HVDLITE_MPI_ABI=openmpi  Open MPI's mpi.h (libmpi.so.40: Open MPI 4.x and 5.x)
 *   HVDLITE_MPI_ABI=mpich    MPICH's mpi.h (libmpi.so.12: MPICH, Intel MPI, MVAPICH, Cray MPICH)
 *   HVDLITE_MPI_ABI=mpiabi   the MPI 5.0 standard ABI's mpi_abi.h (libmpi_abi.so.1)
 * It links no libmpi: the core has already loaded the chosen one into the global namespace
 * (library.cc), where this library's MPI_* references resolve. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(HVDLITE_MPI_ABI_MPIABI)
#include <mpi_abi.h>
#define HVDLITE_MPI_ABI "mpiabi"
#elif defined(HVDLITE_MPI_ABI_OPENMPI)
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#define HVDLITE_MPI_ABI "openmpi"
#elif defined(HVDLITE_MPI_ABI_MPICH)
#include <mpi.h>
#define HVDLITE_MPI_ABI "mpich"
#else
#error "define one of HVDLITE_MPI_ABI_OPENMPI, HVDLITE_MPI_ABI_MPICH, HVDLITE_MPI_ABI_MPIABI"
#endif

#include "mpi/api.h"

#define EXPORT __attribute__((visibility("default")))

/* Handles cross as the family's own value widened to a pointer (api.h): a pointer stays one, an
 * int handle (MPICH) is sign-extended and narrowed back. */
#define OUT(T, native) ((T)(intptr_t)(native))
#define IN(T, value) ((T)(intptr_t)(value))

_Static_assert(sizeof(MPI_Status) <= HVDLITE_MPI_NATIVE_STATUS_BYTES,
               "the family's MPI_Status fits HvdliteMpiStatus.native");

static void status_out(const MPI_Status* native, HvdliteMpiStatus* out) {
  if (!out) return;
  out->MPI_SOURCE = native->MPI_SOURCE;
  out->MPI_TAG = native->MPI_TAG;
  out->MPI_ERROR = native->MPI_ERROR;
  memcpy(out->native, native, sizeof(MPI_Status));
}

/* A native status to pass MPI: the caller's buffer, or MPI_STATUS_IGNORE when it wants none. */
#define STATUS_ARG(out, local) ((out) ? &(local) : MPI_STATUS_IGNORE)

/* Requests and statuses in arrays: converted through native arrays, on the stack while small. */
enum { kOnStack = 32 };

typedef struct {
  MPI_Request* requests;
  MPI_Status* statuses;
  MPI_Request requests_here[kOnStack];
  MPI_Status statuses_here[kOnStack];
} NativeArrays;

static int native_arrays(NativeArrays* a, int count, const HvdliteMpiRequest* requests) {
  a->requests = a->requests_here;
  a->statuses = a->statuses_here;
  if (count > kOnStack) {
    a->requests = (MPI_Request*)malloc(sizeof(MPI_Request) * (size_t)count);
    a->statuses = (MPI_Status*)malloc(sizeof(MPI_Status) * (size_t)count);
    if (!a->requests || !a->statuses) {
      free(a->requests);
      free(a->statuses);
      return 0;
    }
  }
  for (int i = 0; i < count; ++i) a->requests[i] = IN(MPI_Request, requests[i]);
  return 1;
}

static void native_arrays_done(NativeArrays* a, int count, HvdliteMpiRequest* requests,
                               HvdliteMpiStatus* statuses, int statuses_valid) {
  for (int i = 0; i < count; ++i) {
    requests[i] = OUT(HvdliteMpiRequest, a->requests[i]);
    if (statuses && statuses_valid) status_out(&a->statuses[i], &statuses[i]);
  }
  if (a->requests != a->requests_here) {
    free(a->requests);
    free(a->statuses);
  }
}

static void copy_text(const char* from, int len, char* to, int capacity) {
  if (capacity <= 0) return;
  if (len < 0) len = 0;
  if (len > capacity - 1) len = capacity - 1;
  memcpy(to, from, (size_t)len);
  to[len] = 0;
}

/* -- environment ------------------------------------------------------------------------- */

static int initialized(int* flag) { return MPI_Initialized(flag); }
static int finalized(int* flag) { return MPI_Finalized(flag); }
static int init_thread(int required, int* provided) {
  return MPI_Init_thread(NULL, NULL, required, provided);
}
static int query_thread(int* provided) { return MPI_Query_thread(provided); }
static int finalize(void) { return MPI_Finalize(); }
static int abort_(HvdliteMpiComm comm, int code) { return MPI_Abort(IN(MPI_Comm, comm), code); }

static int get_library_version(char* text, int capacity) {
  static char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  const int rc = MPI_Get_library_version(version, &len);
  copy_text(version, rc == MPI_SUCCESS ? len : 0, text, capacity);
  return rc;
}

static int error_string(int code, char* text, int capacity) {
  char message[MPI_MAX_ERROR_STRING];
  int len = 0;
  const int rc = MPI_Error_string(code, message, &len);
  copy_text(message, rc == MPI_SUCCESS ? len : 0, text, capacity);
  return rc;
}

static int error_class(int code, int* cls) { return MPI_Error_class(code, cls); }

/* -- communicators and groups ------------------------------------------------------------- */

static int comm_rank(HvdliteMpiComm comm, int* rank) { return MPI_Comm_rank(IN(MPI_Comm, comm), rank); }
static int comm_size(HvdliteMpiComm comm, int* size) { return MPI_Comm_size(IN(MPI_Comm, comm), size); }

static int comm_dup(HvdliteMpiComm comm, HvdliteMpiComm* out) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(IN(MPI_Comm, comm), &c);
  *out = OUT(HvdliteMpiComm, c);
  return rc;
}

static int comm_split(HvdliteMpiComm comm, int color, int key, HvdliteMpiComm* out) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(IN(MPI_Comm, comm), color, key, &c);
  *out = OUT(HvdliteMpiComm, c);
  return rc;
}

static int comm_split_type(HvdliteMpiComm comm, int type, int key, HvdliteMpiInfo info,
                           HvdliteMpiComm* out) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_split_type(IN(MPI_Comm, comm), type, key, IN(MPI_Info, info), &c);
  *out = OUT(HvdliteMpiComm, c);
  return rc;
}

static int comm_free(HvdliteMpiComm* comm) {
  MPI_Comm c = IN(MPI_Comm, *comm);
  const int rc = MPI_Comm_free(&c);
  *comm = OUT(HvdliteMpiComm, c);
  return rc;
}

static int comm_set_errhandler(HvdliteMpiComm comm, HvdliteMpiErrhandler handler) {
  return MPI_Comm_set_errhandler(IN(MPI_Comm, comm), IN(MPI_Errhandler, handler));
}

static int comm_get_attr(HvdliteMpiComm comm, int keyval, void* value, int* flag) {
  return MPI_Comm_get_attr(IN(MPI_Comm, comm), keyval, value, flag);
}

static int comm_get_parent(HvdliteMpiComm* parent) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_get_parent(&c);
  *parent = OUT(HvdliteMpiComm, c);
  return rc;
}

static int comm_group(HvdliteMpiComm comm, HvdliteMpiGroup* group) {
  MPI_Group g;
  const int rc = MPI_Comm_group(IN(MPI_Comm, comm), &g);
  *group = OUT(HvdliteMpiGroup, g);
  return rc;
}

static int group_translate_ranks(HvdliteMpiGroup a, int n, const int* ranks, HvdliteMpiGroup b,
                                 int* out) {
  return MPI_Group_translate_ranks(IN(MPI_Group, a), n, (int*)ranks, IN(MPI_Group, b), out);
}

static int group_free(HvdliteMpiGroup* group) {
  MPI_Group g = IN(MPI_Group, *group);
  const int rc = MPI_Group_free(&g);
  *group = OUT(HvdliteMpiGroup, g);
  return rc;
}

static int intercomm_merge(HvdliteMpiComm inter, int high, HvdliteMpiComm* out) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Intercomm_merge(IN(MPI_Comm, inter), high, &c);
  *out = OUT(HvdliteMpiComm, c);
  return rc;
}

static int comm_spawn_multiple(int count, char** commands, char*** argvs, const int* maxprocs,
                               const HvdliteMpiInfo* infos, int root, HvdliteMpiComm comm,
                               HvdliteMpiComm* intercomm, int* errcodes) {
  MPI_Info* native = (MPI_Info*)malloc(sizeof(MPI_Info) * (size_t)(count > 0 ? count : 1));
  if (!native) return MPI_ERR_NO_MEM;
  for (int i = 0; i < count; ++i) native[i] = IN(MPI_Info, infos[i]);
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_spawn_multiple(count, commands, argvs, (int*)maxprocs, native, root,
                                         IN(MPI_Comm, comm), &c, errcodes);
  free(native);
  *intercomm = OUT(HvdliteMpiComm, c);
  return rc;
}

static int info_create(HvdliteMpiInfo* info) {
  MPI_Info i;
  const int rc = MPI_Info_create(&i);
  *info = OUT(HvdliteMpiInfo, i);
  return rc;
}

static int info_set(HvdliteMpiInfo info, const char* key, const char* value) {
  return MPI_Info_set(IN(MPI_Info, info), (char*)key, (char*)value);
}

static int info_free(HvdliteMpiInfo* info) {
  MPI_Info i = IN(MPI_Info, *info);
  const int rc = MPI_Info_free(&i);
  *info = OUT(HvdliteMpiInfo, i);
  return rc;
}

/* -- point-to-point ----------------------------------------------------------------------- */

static int isend(const void* buf, int count, HvdliteMpiDatatype type, int dest, int tag,
                 HvdliteMpiComm comm, HvdliteMpiRequest* request) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Isend((void*)buf, count, IN(MPI_Datatype, type), dest, tag,
                           IN(MPI_Comm, comm), &r);
  *request = OUT(HvdliteMpiRequest, r);
  return rc;
}

static int irecv(void* buf, int count, HvdliteMpiDatatype type, int source, int tag,
                 HvdliteMpiComm comm, HvdliteMpiRequest* request) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Irecv(buf, count, IN(MPI_Datatype, type), source, tag, IN(MPI_Comm, comm), &r);
  *request = OUT(HvdliteMpiRequest, r);
  return rc;
}

static int recv(void* buf, int count, HvdliteMpiDatatype type, int source, int tag,
                HvdliteMpiComm comm, HvdliteMpiStatus* status) {
  MPI_Status s;
  const int rc = MPI_Recv(buf, count, IN(MPI_Datatype, type), source, tag, IN(MPI_Comm, comm),
                          STATUS_ARG(status, s));
  if (status) status_out(&s, status);
  return rc;
}

static int iprobe(int source, int tag, HvdliteMpiComm comm, int* flag, HvdliteMpiStatus* status) {
  MPI_Status s;
  const int rc = MPI_Iprobe(source, tag, IN(MPI_Comm, comm), flag, STATUS_ARG(status, s));
  if (status && *flag) status_out(&s, status);
  return rc;
}

static int improbe(int source, int tag, HvdliteMpiComm comm, int* flag, HvdliteMpiMessage* message,
                   HvdliteMpiStatus* status) {
  MPI_Status s;
  MPI_Message m = MPI_MESSAGE_NULL;
  const int rc = MPI_Improbe(source, tag, IN(MPI_Comm, comm), flag, &m, STATUS_ARG(status, s));
  *message = OUT(HvdliteMpiMessage, m);
  if (status && *flag) status_out(&s, status);
  return rc;
}

static int imrecv(void* buf, int count, HvdliteMpiDatatype type, HvdliteMpiMessage* message,
                  HvdliteMpiRequest* request) {
  MPI_Message m = IN(MPI_Message, *message);
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Imrecv(buf, count, IN(MPI_Datatype, type), &m, &r);
  *message = OUT(HvdliteMpiMessage, m);
  *request = OUT(HvdliteMpiRequest, r);
  return rc;
}

static int get_count(const HvdliteMpiStatus* status, HvdliteMpiDatatype type, int* count) {
  MPI_Status s;
  memcpy(&s, status->native, sizeof(MPI_Status));
  return MPI_Get_count(&s, IN(MPI_Datatype, type), count);
}

static int test(HvdliteMpiRequest* request, int* flag, HvdliteMpiStatus* status) {
  MPI_Request r = IN(MPI_Request, *request);
  MPI_Status s;
  const int rc = MPI_Test(&r, flag, STATUS_ARG(status, s));
  *request = OUT(HvdliteMpiRequest, r);
  if (status && *flag) status_out(&s, status);
  return rc;
}

static int wait_(HvdliteMpiRequest* request, HvdliteMpiStatus* status) {
  MPI_Request r = IN(MPI_Request, *request);
  MPI_Status s;
  const int rc = MPI_Wait(&r, STATUS_ARG(status, s));
  *request = OUT(HvdliteMpiRequest, r);
  if (status) status_out(&s, status);
  return rc;
}

/* The statuses are written when every request completed, or when the call failed with
 * MPI_ERR_IN_STATUS (each then says how its request ended). */
static int testall(int count, HvdliteMpiRequest* requests, int* flag, HvdliteMpiStatus* statuses) {
  NativeArrays a;
  if (!native_arrays(&a, count, requests)) return MPI_ERR_NO_MEM;
  const int rc = MPI_Testall(count, a.requests, flag, statuses ? a.statuses : MPI_STATUSES_IGNORE);
  native_arrays_done(&a, count, requests, statuses, *flag || rc == MPI_ERR_IN_STATUS);
  return rc;
}

static int waitall(int count, HvdliteMpiRequest* requests, HvdliteMpiStatus* statuses) {
  NativeArrays a;
  if (!native_arrays(&a, count, requests)) return MPI_ERR_NO_MEM;
  const int rc = MPI_Waitall(count, a.requests, statuses ? a.statuses : MPI_STATUSES_IGNORE);
  native_arrays_done(&a, count, requests, statuses, 1);
  return rc;
}

static int cancel(HvdliteMpiRequest* request) {
  MPI_Request r = IN(MPI_Request, *request);
  return MPI_Cancel(&r);
}

static int request_free(HvdliteMpiRequest* request) {
  MPI_Request r = IN(MPI_Request, *request);
  const int rc = MPI_Request_free(&r);
  *request = OUT(HvdliteMpiRequest, r);
  return rc;
}

/* -- collectives --------------------------------------------------------------------------- */

static int barrier(HvdliteMpiComm comm) { return MPI_Barrier(IN(MPI_Comm, comm)); }

static int bcast(void* buf, int count, HvdliteMpiDatatype type, int root, HvdliteMpiComm comm) {
  return MPI_Bcast(buf, count, IN(MPI_Datatype, type), root, IN(MPI_Comm, comm));
}

static int allreduce(const void* send, void* recv, int count, HvdliteMpiDatatype type,
                     HvdliteMpiOp op, HvdliteMpiComm comm) {
  return MPI_Allreduce((void*)send, recv, count, IN(MPI_Datatype, type), IN(MPI_Op, op),
                       IN(MPI_Comm, comm));
}

static int iallreduce(const void* send, void* recv, int count, HvdliteMpiDatatype type,
                      HvdliteMpiOp op, HvdliteMpiComm comm, HvdliteMpiRequest* request) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce((void*)send, recv, count, IN(MPI_Datatype, type), IN(MPI_Op, op),
                                IN(MPI_Comm, comm), &r);
  *request = OUT(HvdliteMpiRequest, r);
  return rc;
}

static int gather(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                  int recv_count, HvdliteMpiDatatype recv_type, int root, HvdliteMpiComm comm) {
  return MPI_Gather((void*)send, send_count, IN(MPI_Datatype, send_type), recv, recv_count,
                    IN(MPI_Datatype, recv_type), root, IN(MPI_Comm, comm));
}

static int gatherv(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                   const int* recv_counts, const int* displs, HvdliteMpiDatatype recv_type,
                   int root, HvdliteMpiComm comm) {
  return MPI_Gatherv((void*)send, send_count, IN(MPI_Datatype, send_type), recv, (int*)recv_counts,
                     (int*)displs, IN(MPI_Datatype, recv_type), root, IN(MPI_Comm, comm));
}

static int allgatherv(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                      const int* recv_counts, const int* displs, HvdliteMpiDatatype recv_type,
                      HvdliteMpiComm comm) {
  return MPI_Allgatherv((void*)send, send_count, IN(MPI_Datatype, send_type), recv,
                        (int*)recv_counts, (int*)displs, IN(MPI_Datatype, recv_type),
                        IN(MPI_Comm, comm));
}

static int alltoall(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                    int recv_count, HvdliteMpiDatatype recv_type, HvdliteMpiComm comm) {
  return MPI_Alltoall((void*)send, send_count, IN(MPI_Datatype, send_type), recv, recv_count,
                      IN(MPI_Datatype, recv_type), IN(MPI_Comm, comm));
}

static int alltoallv(const void* send, const int* send_counts, const int* send_displs,
                     HvdliteMpiDatatype send_type, void* recv, const int* recv_counts,
                     const int* recv_displs, HvdliteMpiDatatype recv_type, HvdliteMpiComm comm) {
  return MPI_Alltoallv((void*)send, (int*)send_counts, (int*)send_displs,
                       IN(MPI_Datatype, send_type), recv, (int*)recv_counts, (int*)recv_displs,
                       IN(MPI_Datatype, recv_type), IN(MPI_Comm, comm));
}

/* -- ULFM ---------------------------------------------------------------------------------- */

/* Note [ULFM at run time]
 * Open MPI 5 has MPIX_Comm_shrink and its kin, Open MPI 4.1 has not, and both are libmpi.so.40:
 * the functions are looked up in the loaded library, so one plugin serves both. Only the Open
 * MPI plugin looks. MPICH declares them too, but its ch4 device (the PyPI wheel's, Debian's)
 * aborts in every MPIX_Comm_* call, and Intel MPI crashes in MPIX_Comm_shrink
 * (docs/elastic.md, Limits); the standard ABI has no ULFM. */
typedef int (*CommFn)(MPI_Comm);
typedef int (*CommOutFn)(MPI_Comm, MPI_Comm*);
typedef int (*CommFlagFn)(MPI_Comm, int*);
static CommFn ulfm_revoke, ulfm_failure_ack;
static CommOutFn ulfm_shrink;
static CommFlagFn ulfm_agree;

static int comm_revoke(HvdliteMpiComm comm) { return ulfm_revoke(IN(MPI_Comm, comm)); }
static int comm_failure_ack(HvdliteMpiComm comm) { return ulfm_failure_ack(IN(MPI_Comm, comm)); }
static int comm_agree(HvdliteMpiComm comm, int* flag) { return ulfm_agree(IN(MPI_Comm, comm), flag); }
static int comm_shrink(HvdliteMpiComm comm, HvdliteMpiComm* out) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = ulfm_shrink(IN(MPI_Comm, comm), &c);
  *out = OUT(HvdliteMpiComm, c);
  return rc;
}

static void find_ulfm(HvdliteMpiApi* api) {
  api->err_proc_failed = api->err_proc_failed_pending = api->err_revoked = -1;
#if defined(HVDLITE_MPI_ABI_OPENMPI) && defined(OMPI_HAVE_MPI_EXT_FTMPI)
  ulfm_revoke = (CommFn)dlsym(RTLD_DEFAULT, "MPIX_Comm_revoke");
  ulfm_failure_ack = (CommFn)dlsym(RTLD_DEFAULT, "MPIX_Comm_failure_ack");
  ulfm_shrink = (CommOutFn)dlsym(RTLD_DEFAULT, "MPIX_Comm_shrink");
  ulfm_agree = (CommFlagFn)dlsym(RTLD_DEFAULT, "MPIX_Comm_agree");
  if (!ulfm_revoke || !ulfm_failure_ack || !ulfm_shrink || !ulfm_agree) return;
  api->err_proc_failed = MPIX_ERR_PROC_FAILED;
  api->err_proc_failed_pending = MPIX_ERR_PROC_FAILED_PENDING;
  api->err_revoked = MPIX_ERR_REVOKED;
  api->comm_revoke = comm_revoke;
  api->comm_failure_ack = comm_failure_ack;
  api->comm_shrink = comm_shrink;
  api->comm_agree = comm_agree;
#else
  (void)comm_revoke;
  (void)comm_failure_ack;
  (void)comm_shrink;
  (void)comm_agree;
#endif
}

/* -- the table ----------------------------------------------------------------------------- */

EXPORT const HvdliteMpiApi* hvdlite_mpi_plugin(int api_version) {
  static HvdliteMpiApi api;
  static int filled = 0;
  if (api_version != HVDLITE_MPI_API_VERSION) return NULL;
  if (filled) return &api;
  api.api_version = HVDLITE_MPI_API_VERSION;
  api.abi = HVDLITE_MPI_ABI;

  api.comm_world = OUT(HvdliteMpiComm, MPI_COMM_WORLD);
  api.comm_null = OUT(HvdliteMpiComm, MPI_COMM_NULL);
  api.request_null = OUT(HvdliteMpiRequest, MPI_REQUEST_NULL);
  api.byte_ = OUT(HvdliteMpiDatatype, MPI_BYTE);
  api.char_ = OUT(HvdliteMpiDatatype, MPI_CHAR);
  api.int_ = OUT(HvdliteMpiDatatype, MPI_INT);
  api.int64 = OUT(HvdliteMpiDatatype, MPI_INT64_T);
  api.uint64 = OUT(HvdliteMpiDatatype, MPI_UINT64_T);
  api.op_min = OUT(HvdliteMpiOp, MPI_MIN);
  api.op_land = OUT(HvdliteMpiOp, MPI_LAND);
  api.op_lor = OUT(HvdliteMpiOp, MPI_LOR);
  api.op_band = OUT(HvdliteMpiOp, MPI_BAND);
  api.info_null = OUT(HvdliteMpiInfo, MPI_INFO_NULL);
  api.errors_return = OUT(HvdliteMpiErrhandler, MPI_ERRORS_RETURN);
  api.in_place = MPI_IN_PLACE;

  api.err_in_status = MPI_ERR_IN_STATUS;
  api.err_pending = MPI_ERR_PENDING;
  api.err_truncate = MPI_ERR_TRUNCATE;
  api.thread_serialized = MPI_THREAD_SERIALIZED;
  api.thread_multiple = MPI_THREAD_MULTIPLE;
  api.undefined = MPI_UNDEFINED;
  api.any_source = MPI_ANY_SOURCE;
  api.comm_type_shared = MPI_COMM_TYPE_SHARED;
  api.tag_ub = MPI_TAG_UB;

  api.initialized = initialized;
  api.finalized = finalized;
  api.init_thread = init_thread;
  api.query_thread = query_thread;
  api.finalize = finalize;
  api.abort = abort_;
  api.get_library_version = get_library_version;
  api.error_string = error_string;
  api.error_class = error_class;

  api.comm_rank = comm_rank;
  api.comm_size = comm_size;
  api.comm_dup = comm_dup;
  api.comm_split = comm_split;
  api.comm_split_type = comm_split_type;
  api.comm_free = comm_free;
  api.comm_set_errhandler = comm_set_errhandler;
  api.comm_get_attr = comm_get_attr;
  api.comm_get_parent = comm_get_parent;
  api.comm_group = comm_group;
  api.group_translate_ranks = group_translate_ranks;
  api.group_free = group_free;
  api.intercomm_merge = intercomm_merge;
  api.comm_spawn_multiple = comm_spawn_multiple;
  api.info_create = info_create;
  api.info_set = info_set;
  api.info_free = info_free;

  api.isend = isend;
  api.irecv = irecv;
  api.recv = recv;
  api.iprobe = iprobe;
  api.improbe = improbe;
  api.imrecv = imrecv;
  api.get_count = get_count;
  api.test = test;
  api.testall = testall;
  api.wait = wait_;
  api.waitall = waitall;
  api.cancel = cancel;
  api.request_free = request_free;

  api.barrier = barrier;
  api.bcast = bcast;
  api.allreduce = allreduce;
  api.iallreduce = iallreduce;
  api.gather = gather;
  api.gatherv = gatherv;
  api.allgatherv = allgatherv;
  api.alltoall = alltoall;
  api.alltoallv = alltoallv;

  find_ulfm(&api);
  filled = 1;
  return &api;
}
