// MPI's names for the core, over the loaded plugin's table (api.h, Note [one wheel, any MPI]).
//
// The transport code (transport/mpi*.cc, fault_tolerance.cc) is written as ordinary MPI code:
// MPI_Isend, MPI_COMM_WORLD, MPI_Status. This header is what makes that compile without any
// MPI's mpi.h: each name is an inline call through, or a field of, the table that
// mpi/library.cc loaded at init(). Only the names hvdlite uses are here; a new MPI call means a
// new table entry in api.h and plugin.c (and HVDLITE_MPI_API_VERSION bumped).
//
// Every name has internal linkage, so none of them can bind to, or be bound by, the real
// MPI_* symbols of the libmpi loaded into the same process.
#pragma once

#include "mpi/api.h"

namespace hvdlite {
namespace mpi {
// The loaded table. Only valid after library.cc's load() succeeded; the transport is made only
// then, so no MPI call can come earlier.
extern const HvdliteMpiApi* g_api;
inline const HvdliteMpiApi& api() { return *g_api; }
}  // namespace mpi
}  // namespace hvdlite

using MPI_Comm = HvdliteMpiComm;
using MPI_Request = HvdliteMpiRequest;
using MPI_Datatype = HvdliteMpiDatatype;
using MPI_Op = HvdliteMpiOp;
using MPI_Info = HvdliteMpiInfo;
using MPI_Group = HvdliteMpiGroup;
using MPI_Message = HvdliteMpiMessage;
using MPI_Status = HvdliteMpiStatus;

#define HVDLITE_MPI_ (::hvdlite::mpi::api())

// Predefined handles and values: the loaded family's own (they differ between families).
#define MPI_COMM_WORLD (HVDLITE_MPI_.comm_world)
#define MPI_COMM_NULL (HVDLITE_MPI_.comm_null)
#define MPI_REQUEST_NULL (HVDLITE_MPI_.request_null)
#define MPI_BYTE (HVDLITE_MPI_.byte_)
#define MPI_CHAR (HVDLITE_MPI_.char_)
#define MPI_INT (HVDLITE_MPI_.int_)
#define MPI_INT64_T (HVDLITE_MPI_.int64)
#define MPI_UINT64_T (HVDLITE_MPI_.uint64)
#define MPI_MIN (HVDLITE_MPI_.op_min)
#define MPI_LAND (HVDLITE_MPI_.op_land)
#define MPI_LOR (HVDLITE_MPI_.op_lor)
#define MPI_BAND (HVDLITE_MPI_.op_band)
#define MPI_INFO_NULL (HVDLITE_MPI_.info_null)
#define MPI_ERRORS_RETURN (HVDLITE_MPI_.errors_return)
#define MPI_IN_PLACE (HVDLITE_MPI_.in_place)
#define MPI_ERR_IN_STATUS (HVDLITE_MPI_.err_in_status)
#define MPI_ERR_PENDING (HVDLITE_MPI_.err_pending)
#define MPI_ERR_TRUNCATE (HVDLITE_MPI_.err_truncate)
#define MPI_THREAD_SERIALIZED (HVDLITE_MPI_.thread_serialized)
#define MPI_THREAD_MULTIPLE (HVDLITE_MPI_.thread_multiple)
#define MPI_UNDEFINED (HVDLITE_MPI_.undefined)
#define MPI_ANY_SOURCE (HVDLITE_MPI_.any_source)
#define MPI_COMM_TYPE_SHARED (HVDLITE_MPI_.comm_type_shared)
#define MPI_TAG_UB (HVDLITE_MPI_.tag_ub)

// The same in every family.
#define MPI_SUCCESS 0
#define MPI_STATUS_IGNORE (static_cast<MPI_Status*>(nullptr))
// Buffers for text from MPI (the plugin truncates to what it is given).
#define MPI_MAX_ERROR_STRING 1024
#define MPI_MAX_LIBRARY_VERSION_STRING 8192

namespace {
// clang-format off
inline int MPI_Initialized(int* flag) { return HVDLITE_MPI_.initialized(flag); }
inline int MPI_Finalized(int* flag) { return HVDLITE_MPI_.finalized(flag); }
inline int MPI_Init_thread(int*, char***, int required, int* provided) { return HVDLITE_MPI_.init_thread(required, provided); }
inline int MPI_Query_thread(int* provided) { return HVDLITE_MPI_.query_thread(provided); }
inline int MPI_Finalize() { return HVDLITE_MPI_.finalize(); }
inline int MPI_Abort(MPI_Comm comm, int code) { return HVDLITE_MPI_.abort(comm, code); }
inline int MPI_Get_library_version(char* text, int* len) {
  const int rc = HVDLITE_MPI_.get_library_version(text, MPI_MAX_LIBRARY_VERSION_STRING);
  int n = 0;
  while (text[n]) ++n;
  *len = n;
  return rc;
}
inline int MPI_Error_string(int code, char* text, int* len) {
  const int rc = HVDLITE_MPI_.error_string(code, text, MPI_MAX_ERROR_STRING);
  int n = 0;
  while (text[n]) ++n;
  *len = n;
  return rc;
}
inline int MPI_Error_class(int code, int* cls) { return HVDLITE_MPI_.error_class(code, cls); }

inline int MPI_Comm_rank(MPI_Comm c, int* rank) { return HVDLITE_MPI_.comm_rank(c, rank); }
inline int MPI_Comm_size(MPI_Comm c, int* size) { return HVDLITE_MPI_.comm_size(c, size); }
inline int MPI_Comm_dup(MPI_Comm c, MPI_Comm* out) { return HVDLITE_MPI_.comm_dup(c, out); }
inline int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm* out) { return HVDLITE_MPI_.comm_split(c, color, key, out); }
inline int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm* out) { return HVDLITE_MPI_.comm_split_type(c, type, key, info, out); }
inline int MPI_Comm_free(MPI_Comm* c) { return HVDLITE_MPI_.comm_free(c); }
inline int MPI_Comm_set_errhandler(MPI_Comm c, HvdliteMpiErrhandler h) { return HVDLITE_MPI_.comm_set_errhandler(c, h); }
inline int MPI_Comm_get_attr(MPI_Comm c, int key, void* value, int* flag) { return HVDLITE_MPI_.comm_get_attr(c, key, value, flag); }
inline int MPI_Comm_get_parent(MPI_Comm* parent) { return HVDLITE_MPI_.comm_get_parent(parent); }
inline int MPI_Comm_group(MPI_Comm c, MPI_Group* g) { return HVDLITE_MPI_.comm_group(c, g); }
inline int MPI_Group_translate_ranks(MPI_Group a, int n, const int* ranks, MPI_Group b, int* out) { return HVDLITE_MPI_.group_translate_ranks(a, n, ranks, b, out); }
inline int MPI_Group_free(MPI_Group* g) { return HVDLITE_MPI_.group_free(g); }
inline int MPI_Intercomm_merge(MPI_Comm inter, int high, MPI_Comm* out) { return HVDLITE_MPI_.intercomm_merge(inter, high, out); }
inline int MPI_Comm_spawn_multiple(int count, char** commands, char*** argvs, const int* maxprocs, const MPI_Info* infos, int root, MPI_Comm c, MPI_Comm* inter, int* errcodes) { return HVDLITE_MPI_.comm_spawn_multiple(count, commands, argvs, maxprocs, infos, root, c, inter, errcodes); }
inline int MPI_Info_create(MPI_Info* info) { return HVDLITE_MPI_.info_create(info); }
inline int MPI_Info_set(MPI_Info info, const char* key, const char* value) { return HVDLITE_MPI_.info_set(info, key, value); }
inline int MPI_Info_free(MPI_Info* info) { return HVDLITE_MPI_.info_free(info); }

inline int MPI_Isend(const void* buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* r) { return HVDLITE_MPI_.isend(buf, n, t, dest, tag, c, r); }
inline int MPI_Irecv(void* buf, int n, MPI_Datatype t, int source, int tag, MPI_Comm c, MPI_Request* r) { return HVDLITE_MPI_.irecv(buf, n, t, source, tag, c, r); }
inline int MPI_Recv(void* buf, int n, MPI_Datatype t, int source, int tag, MPI_Comm c, MPI_Status* s) { return HVDLITE_MPI_.recv(buf, n, t, source, tag, c, s); }
inline int MPI_Iprobe(int source, int tag, MPI_Comm c, int* flag, MPI_Status* s) { return HVDLITE_MPI_.iprobe(source, tag, c, flag, s); }
inline int MPI_Improbe(int source, int tag, MPI_Comm c, int* flag, MPI_Message* m, MPI_Status* s) { return HVDLITE_MPI_.improbe(source, tag, c, flag, m, s); }
inline int MPI_Imrecv(void* buf, int n, MPI_Datatype t, MPI_Message* m, MPI_Request* r) { return HVDLITE_MPI_.imrecv(buf, n, t, m, r); }
inline int MPI_Get_count(const MPI_Status* s, MPI_Datatype t, int* n) { return HVDLITE_MPI_.get_count(s, t, n); }
inline int MPI_Test(MPI_Request* r, int* flag, MPI_Status* s) { return HVDLITE_MPI_.test(r, flag, s); }
inline int MPI_Testall(int n, MPI_Request* r, int* flag, MPI_Status* s) { return HVDLITE_MPI_.testall(n, r, flag, s); }
inline int MPI_Wait(MPI_Request* r, MPI_Status* s) { return HVDLITE_MPI_.wait(r, s); }
inline int MPI_Waitall(int n, MPI_Request* r, MPI_Status* s) { return HVDLITE_MPI_.waitall(n, r, s); }
inline int MPI_Cancel(MPI_Request* r) { return HVDLITE_MPI_.cancel(r); }
inline int MPI_Request_free(MPI_Request* r) { return HVDLITE_MPI_.request_free(r); }

inline int MPI_Barrier(MPI_Comm c) { return HVDLITE_MPI_.barrier(c); }
inline int MPI_Bcast(void* buf, int n, MPI_Datatype t, int root, MPI_Comm c) { return HVDLITE_MPI_.bcast(buf, n, t, root, c); }
inline int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) { return HVDLITE_MPI_.allreduce(s, r, n, t, op, c); }
inline int MPI_Iallreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* req) { return HVDLITE_MPI_.iallreduce(s, r, n, t, op, c, req); }
inline int MPI_Gather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root, MPI_Comm c) { return HVDLITE_MPI_.gather(s, sn, st, r, rn, rt, root, c); }
inline int MPI_Gatherv(const void* s, int sn, MPI_Datatype st, void* r, const int* rn, const int* displs, MPI_Datatype rt, int root, MPI_Comm c) { return HVDLITE_MPI_.gatherv(s, sn, st, r, rn, displs, rt, root, c); }
inline int MPI_Allgatherv(const void* s, int sn, MPI_Datatype st, void* r, const int* rn, const int* displs, MPI_Datatype rt, MPI_Comm c) { return HVDLITE_MPI_.allgatherv(s, sn, st, r, rn, displs, rt, c); }
inline int MPI_Alltoall(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) { return HVDLITE_MPI_.alltoall(s, sn, st, r, rn, rt, c); }
inline int MPI_Alltoallv(const void* s, const int* sn, const int* sd, MPI_Datatype st, void* r, const int* rn, const int* rd, MPI_Datatype rt, MPI_Comm c) { return HVDLITE_MPI_.alltoallv(s, sn, sd, st, r, rn, rd, rt, c); }
// clang-format on
}  // namespace
