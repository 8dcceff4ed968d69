/* The seam between hvdlite's core and an MPI library: Note [one wheel, any MPI].
 *
 * The core (the _core module) links no MPI and includes no mpi.h. Every MPI call it makes goes
 * through one HvdliteMpiApi table, which a plugin fills: plugin.c, compiled once per MPI ABI
 * family against that family's own mpi.h (Open MPI's libmpi.so.40, MPICH's libmpi.so.12, which
 * Intel MPI, MVAPICH and Cray MPICH share, and the MPI 5.0 standard ABI's libmpi_abi.so.1).
 * library.cc loads the libmpi chosen by src/hvdlite/mpi_library.py, then the plugin of its family.
 *
 * Plain C on purpose: the core and each plugin carry their own C++ runtime or none (the wheel's
 * core links libc++ statically), so nothing but C types, function pointers and ints may cross.
 *
 * Handles (communicators, requests, datatypes, ...) cross as the family's own value, widened to a
 * pointer: a pointer for Open MPI and the standard ABI, a sign-extended int for MPICH. The core
 * only stores, compares and hands them back, so no handle is ever translated; predefined ones
 * (MPI_COMM_WORLD, MPI_BYTE, ...) are fields of the table. Statuses are the one thing converted:
 * each family lays MPI_Status out differently, so the plugin fills HvdliteMpiStatus and keeps the
 * native status inside it for MPI_Get_count.
 */
#ifndef HVDLITE_MPI_API_H_
#define HVDLITE_MPI_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the table changes; a plugin of another version is refused at load. */
#define HVDLITE_MPI_API_VERSION 1

typedef struct HvdliteMpiComm_* HvdliteMpiComm;
typedef struct HvdliteMpiRequest_* HvdliteMpiRequest;
typedef struct HvdliteMpiDatatype_* HvdliteMpiDatatype;
typedef struct HvdliteMpiOp_* HvdliteMpiOp;
typedef struct HvdliteMpiInfo_* HvdliteMpiInfo;
typedef struct HvdliteMpiGroup_* HvdliteMpiGroup;
typedef struct HvdliteMpiErrhandler_* HvdliteMpiErrhandler;
typedef struct HvdliteMpiMessage_* HvdliteMpiMessage;

/* Room for any family's MPI_Status (Open MPI 24 bytes, MPICH 20, the standard ABI 32). */
#define HVDLITE_MPI_NATIVE_STATUS_BYTES 64

typedef struct HvdliteMpiStatus {
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int reserved_;
  /* The family's own MPI_Status, as MPI wrote it (for get_count). */
  uint64_t native[HVDLITE_MPI_NATIVE_STATUS_BYTES / sizeof(uint64_t)];
} HvdliteMpiStatus;

typedef struct HvdliteMpiApi {
  int api_version;   /* HVDLITE_MPI_API_VERSION of the plugin */
  const char* abi;   /* "openmpi", "mpich" or "mpiabi": the family it was compiled for */

  /* Predefined handles. */
  HvdliteMpiComm comm_world, comm_null;
  HvdliteMpiRequest request_null;
  HvdliteMpiDatatype byte_, char_, int_, int64, uint64;
  HvdliteMpiOp op_min, op_land, op_lor, op_band;
  HvdliteMpiInfo info_null;
  HvdliteMpiErrhandler errors_return;
  void* in_place;

  /* Predefined ints (they differ between families). MPI_SUCCESS is 0 in every one. */
  int err_in_status, err_pending, err_truncate;
  int thread_serialized, thread_multiple;
  int undefined, any_source, comm_type_shared, tag_ub;

  /* ULFM's error classes, or -1 where the library has no ULFM (see comm_shrink). */
  int err_proc_failed, err_proc_failed_pending, err_revoked;

  /* Environment. */
  int (*initialized)(int* flag);
  int (*finalized)(int* flag);
  int (*init_thread)(int required, int* provided);
  int (*query_thread)(int* provided);
  int (*finalize)(void);
  int (*abort)(HvdliteMpiComm comm, int code);
  /* Writes at most `capacity` bytes, always 0-terminated. */
  int (*get_library_version)(char* text, int capacity);
  int (*error_string)(int code, char* text, int capacity);
  int (*error_class)(int code, int* cls);

  /* Communicators and groups. */
  int (*comm_rank)(HvdliteMpiComm comm, int* rank);
  int (*comm_size)(HvdliteMpiComm comm, int* size);
  int (*comm_dup)(HvdliteMpiComm comm, HvdliteMpiComm* out);
  int (*comm_split)(HvdliteMpiComm comm, int color, int key, HvdliteMpiComm* out);
  int (*comm_split_type)(HvdliteMpiComm comm, int type, int key, HvdliteMpiInfo info,
                         HvdliteMpiComm* out);
  int (*comm_free)(HvdliteMpiComm* comm);
  int (*comm_set_errhandler)(HvdliteMpiComm comm, HvdliteMpiErrhandler handler);
  int (*comm_get_attr)(HvdliteMpiComm comm, int keyval, void* value, int* flag);
  int (*comm_get_parent)(HvdliteMpiComm* parent);
  int (*comm_group)(HvdliteMpiComm comm, HvdliteMpiGroup* group);
  int (*group_translate_ranks)(HvdliteMpiGroup a, int n, const int* ranks, HvdliteMpiGroup b,
                               int* out);
  int (*group_free)(HvdliteMpiGroup* group);
  int (*intercomm_merge)(HvdliteMpiComm inter, int high, HvdliteMpiComm* out);
  int (*comm_spawn_multiple)(int count, char** commands, char*** argvs, const int* maxprocs,
                             const HvdliteMpiInfo* infos, int root, HvdliteMpiComm comm,
                             HvdliteMpiComm* intercomm, int* errcodes);
  int (*info_create)(HvdliteMpiInfo* info);
  int (*info_set)(HvdliteMpiInfo info, const char* key, const char* value);
  int (*info_free)(HvdliteMpiInfo* info);

  /* Point-to-point. A null status pointer is MPI_STATUS_IGNORE (MPI_STATUSES_IGNORE). */
  int (*isend)(const void* buf, int count, HvdliteMpiDatatype type, int dest, int tag,
               HvdliteMpiComm comm, HvdliteMpiRequest* request);
  int (*irecv)(void* buf, int count, HvdliteMpiDatatype type, int source, int tag,
               HvdliteMpiComm comm, HvdliteMpiRequest* request);
  int (*recv)(void* buf, int count, HvdliteMpiDatatype type, int source, int tag,
              HvdliteMpiComm comm, HvdliteMpiStatus* status);
  int (*iprobe)(int source, int tag, HvdliteMpiComm comm, int* flag, HvdliteMpiStatus* status);
  int (*improbe)(int source, int tag, HvdliteMpiComm comm, int* flag, HvdliteMpiMessage* message,
                 HvdliteMpiStatus* status);
  int (*imrecv)(void* buf, int count, HvdliteMpiDatatype type, HvdliteMpiMessage* message,
                HvdliteMpiRequest* request);
  int (*get_count)(const HvdliteMpiStatus* status, HvdliteMpiDatatype type, int* count);
  int (*test)(HvdliteMpiRequest* request, int* flag, HvdliteMpiStatus* status);
  int (*testall)(int count, HvdliteMpiRequest* requests, int* flag, HvdliteMpiStatus* statuses);
  int (*wait)(HvdliteMpiRequest* request, HvdliteMpiStatus* status);
  int (*waitall)(int count, HvdliteMpiRequest* requests, HvdliteMpiStatus* statuses);
  int (*cancel)(HvdliteMpiRequest* request);
  int (*request_free)(HvdliteMpiRequest* request);

  /* Collectives. */
  int (*barrier)(HvdliteMpiComm comm);
  int (*bcast)(void* buf, int count, HvdliteMpiDatatype type, int root, HvdliteMpiComm comm);
  int (*allreduce)(const void* send, void* recv, int count, HvdliteMpiDatatype type,
                   HvdliteMpiOp op, HvdliteMpiComm comm);
  int (*iallreduce)(const void* send, void* recv, int count, HvdliteMpiDatatype type,
                    HvdliteMpiOp op, HvdliteMpiComm comm, HvdliteMpiRequest* request);
  int (*gather)(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                int recv_count, HvdliteMpiDatatype recv_type, int root, HvdliteMpiComm comm);
  int (*gatherv)(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                 const int* recv_counts, const int* displs, HvdliteMpiDatatype recv_type, int root,
                 HvdliteMpiComm comm);
  int (*allgatherv)(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                    const int* recv_counts, const int* displs, HvdliteMpiDatatype recv_type,
                    HvdliteMpiComm comm);
  int (*alltoall)(const void* send, int send_count, HvdliteMpiDatatype send_type, void* recv,
                  int recv_count, HvdliteMpiDatatype recv_type, HvdliteMpiComm comm);
  int (*alltoallv)(const void* send, const int* send_counts, const int* send_displs,
                   HvdliteMpiDatatype send_type, void* recv, const int* recv_counts,
                   const int* recv_displs, HvdliteMpiDatatype recv_type, HvdliteMpiComm comm);

  /* ULFM (MPIX_Comm_*), found in the loaded library at run time; null where it has none. */
  int (*comm_revoke)(HvdliteMpiComm comm);
  int (*comm_shrink)(HvdliteMpiComm comm, HvdliteMpiComm* out);
  int (*comm_agree)(HvdliteMpiComm comm, int* flag);
  int (*comm_failure_ack)(HvdliteMpiComm comm);
} HvdliteMpiApi;

/* The one symbol a plugin exports: its table, or null when `api_version` is not its own. */
typedef const HvdliteMpiApi* (*HvdliteMpiPluginEntry)(int api_version);
#define HVDLITE_MPI_PLUGIN_ENTRY "hvdlite_mpi_plugin"

#ifdef __cplusplus
}
#endif

#endif /* HVDLITE_MPI_API_H_ */
