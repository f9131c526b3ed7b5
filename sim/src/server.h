// What the cards of one simulated server share, beside the host: the line on which a semaphore
// raised on any card wakes the firmware waits for another card's semaphore (hw::kWaitHost). The
// PCIe switch between the cards belongs here too (issue 22).
#pragma once

#include <systemc>

namespace spyre::sim {

class Server {
 public:
  /// Notified whenever a card raises a semaphore.
  sc_core::sc_event& signal() { return signal_; }

 private:
  sc_core::sc_event signal_{"server_signal"};
};

}  // namespace spyre::sim
