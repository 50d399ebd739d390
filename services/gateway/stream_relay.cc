#include "services/gateway/stream_relay.h"

#include <algorithm>

namespace ced::gateway {

StreamRelay::StreamRelay(int threads) {
  if (threads <= 0) {
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::clamp(cpus / 4, 1, 8);
  }
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      void* tag = nullptr;
      bool ok = false;
      while (cq_.Next(&tag, &ok)) static_cast<Tag*>(tag)->handler->OnCompletion(tag, ok);
    });
  }
}

StreamRelay::~StreamRelay() {
  cq_.Shutdown();
  for (std::thread& t : threads_) t.join();
}

}  // namespace ced::gateway
