// libsystemc references sc_main. Programs that embed the simulator (the Python module, driver
// tests) have their own main and never call SystemC's; this definition satisfies the linker.
#include <cstdio>

extern "C" int sc_main(int /*argc*/, char* /*argv*/[]) {
  std::fputs("spyre: sc_main is not an entry point of this program\n", stderr);
  return 1;
}
