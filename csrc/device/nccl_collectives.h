// CUDA tensors over NCCL: one communicator per process set (per group), created when the
// set's first NCCL response runs, its unique id broadcast over the set's MPI transport.
// Negotiation stays on the CPU; only the data moves here, on hvdlite's stream (which waited
// for the caller's at submission, staging.h's DeviceOrder):
//   - all-reduce: the batch is fused with device-to-device copies into a device fusion
//     buffer, reduced by one ncclAllReduce, and copied out (a lone tensor: in place);
//   - broadcast: ncclBroadcast into the output;
//   - allgather, reducescatter: fused likewise into one NCCL call, or one group of calls
//     where members' sizes differ (Note [NCCL all-gather], Note [NCCL reduce-scatter]);
//   - alltoall: one group of ncclSend/ncclRecv, its counts exchanged over the host transport.
// Outputs whose size negotiation decides are taken from the device's buffer pool (agreed
// across members when large; device_outputs.h) and handed to the caller, whose array gives
// them back.
// Entries complete once their work is queued; the consumer's stream waits for the event
// recorded after it (DeviceOrder::after).
// A watchdog polls ncclCommGetAsyncError while the communicator lives; an error aborts the
// communicator and stops the group on every member with NCCL's message. A group that fails
// for any other reason (a lost rank) aborts it too, so no rank stays blocked inside NCCL.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/device_collectives.h"

namespace hvdlite {
namespace device {

// The factory bindings.cc registers (set_device_collectives_factory).
std::unique_ptr<DeviceCollectives> make_nccl_collectives(Transport& transport,
                                                         const Membership& members,
                                                         DeviceStages stages,
                                                         DeviceCollectives::Complete complete,
                                                         DeviceCollectives::OnError on_error);

// Whether NCCL carries this request (dtype and reduction it can do without a kernel of ours).
bool nccl_can_run(const Request& request);

// Requests NCCL has carried in this process, by op name ("allreduce", ...): what tells a
// device check that a collective really ran on NCCL.
std::vector<std::pair<std::string, long>> nccl_requests_run();

}  // namespace device
}  // namespace hvdlite
