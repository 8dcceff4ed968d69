// Collectives whose data stays on a GPU: responses with `nccl` set (message.h). The group only
// routes them here, in the agreed order; device/nccl_collectives.cc implements them. It is
// created through a factory that the bindings register, so the engine (and its in-process
// unit tests) never link the device code.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/handle.h"
#include "engine/message.h"
#include "engine/tensor_entry.h"
#include "engine/validate.h"
#include "transport/transport.h"

namespace hvdlite {

struct Config;
struct Hierarchy;

// What the device collectives of a group may use besides its transport: its live settings and,
// where the group runs hierarchical all-reduce, its stages (algorithms/hierarchical.h): NCCL
// then reduces within each host and the host transport across hosts.
struct DeviceStages {
  const Config* config = nullptr;
  Hierarchy* hierarchy = nullptr;  // null: flat
};

class DeviceCollectives {
 public:
  using Complete = std::function<void(TensorEntry*, Outcome)>;
  // Called from another thread when the device library reports an error on its own (NCCL's
  // asynchronous errors): the group stops with this message on every member.
  using OnError = std::function<void(const std::string&)>;
  virtual ~DeviceCollectives() = default;
  // Issues (or batches, for all-reduce) the collective of `entry`; entries complete once
  // their work is queued on the device.
  virtual void add(const Response& response, TensorEntry* entry) = 0;
  // Issues every batch still open. Called at the end of each round.
  virtual void flush() = 0;
  // The group failed: no rank may stay blocked in the device library (ncclCommAbort).
  virtual void abort() = 0;
};

using DeviceCollectivesFactory = std::function<std::unique_ptr<DeviceCollectives>(
    Transport&, const Membership&, DeviceStages, DeviceCollectives::Complete, DeviceCollectives::OnError)>;

// Set once by the Python module (bindings.cc); null in the unit tests.
void set_device_collectives_factory(DeviceCollectivesFactory factory);
std::unique_ptr<DeviceCollectives> make_device_collectives(Transport& transport,
                                                           const Membership& members,
                                                           DeviceStages stages,
                                                           DeviceCollectives::Complete complete,
                                                           DeviceCollectives::OnError on_error);

}  // namespace hvdlite
