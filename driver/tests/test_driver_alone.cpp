// The driver on its own, linked without the simulator: this program linking at all shows that
// spyre_driver needs nothing of the model, and the in-process transport, not registered here, is
// refused with a reason rather than a crash.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "spyre/driver/driver.h"
#include "spyre/driver/transport.h"

using namespace spyre;

TEST_CASE("without the simulator linked in, inproc is refused by name") {
  std::unique_ptr<driver::Transport> t;
  const driver::Status s = driver::open_transport("inproc", &t);
  CHECK(s.code() == driver::StatusCode::kNotAvailable);
  CHECK(s.message().find("'inproc' is not linked into this program") != std::string::npos);
  CHECK(t == nullptr);
}

TEST_CASE("a registered opener is what open_transport uses") {
  driver::register_transport("inproc", [](std::unique_ptr<driver::Transport>*) {
    return driver::Status{driver::StatusCode::kNotAvailable, "the test's opener"};
  });
  std::unique_ptr<driver::Transport> t;
  CHECK(driver::open_transport("", &t).message() == "the test's opener");
  CHECK(driver::open_transport("inproc", &t).message() == "the test's opener");
}

TEST_CASE("an unknown kind is refused by name") {
  std::unique_ptr<driver::Transport> t;
  const driver::Status s = driver::open_transport("pcie", &t);
  CHECK(s.code() == driver::StatusCode::kInvalidArgument);
  CHECK(s.message().find("unknown kind 'pcie'") != std::string::npos);
}
