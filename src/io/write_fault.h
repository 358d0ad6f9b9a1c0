// Fault injection for write_file_atomic, a test hook: a SIGKILL or a full disk (ENOSPC) at an
// exact byte of one chosen write, or a SIGKILL around its rename, to prove what a crash leaves.
// Off by default: armed by HPCNET_TEST_WRITE_FAULT (read once, at the first write) or by a test.
#pragma once

#include <cstdint>
#include <string>

namespace hpcnet {

struct WriteFault {
  enum class Action { kNone, kKill, kEnospc };
  enum class At {
    kByte,          // after exactly `byte` bytes of the temporary file have been written
    kBeforeRename,  // the temporary file complete, flushed and closed; not yet renamed
    kAfterRename,   // renamed over the target; its folder not yet synced
    kDone,          // the whole write done, just before write_file_atomic returns
  };
  Action action = Action::kNone;
  At at = At::kByte;
  int64_t byte = 0;  // At::kByte only
  std::string name;  // only writes whose file name contains this ("" = every write)
  int64_t nth = 1;   // the nth such write of this process (1 = the first)
};

// Parses the HPCNET_TEST_WRITE_FAULT syntax ACTION:AT[:NAME[:NTH]]: ACTION kill or enospc; AT a
// byte count or (kill only) before-rename, after-rename or done. "kill:100:checkpoint:3" kills the
// process after the first 100 bytes of its third write of a file whose name contains
// "checkpoint"; "enospc:100" makes the first write fail with ENOSPC once 100 bytes are written (a
// disk with room for 100 bytes). Throws InputError naming the variable for anything else.
WriteFault parse_write_fault(const std::string& spec);

// Arms f for this process's later write_file_atomic calls (Action::kNone disarms), counting
// writes from 0 again; it replaces what HPCNET_TEST_WRITE_FAULT said. For tests: not safe while
// another thread is inside write_file_atomic.
void set_write_fault(const WriteFault& f);

}  // namespace hpcnet
