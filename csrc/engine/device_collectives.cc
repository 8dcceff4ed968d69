#include "engine/device_collectives.h"

#include <mutex>

namespace hvdlite {
namespace {

std::mutex g_mu;
DeviceCollectivesFactory g_factory;

}  // namespace

void set_device_collectives_factory(DeviceCollectivesFactory factory) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_factory = std::move(factory);
}

std::unique_ptr<DeviceCollectives> make_device_collectives(Transport& transport,
                                                           const Membership& members,
                                                           DeviceStages stages,
                                                           DeviceCollectives::Complete complete,
                                                           DeviceCollectives::OnError on_error) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_factory) return nullptr;
  return g_factory(transport, members, stages, std::move(complete), std::move(on_error));
}

}  // namespace hvdlite
