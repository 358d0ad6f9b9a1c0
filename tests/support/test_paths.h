// Where the tests find the source tree (fixtures, configs) and the hpcnet executable. Defined in a
// file the build generates (test_paths.cpp in the build folder), not as compiler flags, so the
// test sources compile to the same objects in any checkout: a compiler cache hits for a fresh
// clone in another folder.
#pragma once

namespace hpcnet::test_paths {
const char* source_dir();  // the repository root
const char* binary();      // the hpcnet executable of this build
}  // namespace hpcnet::test_paths

#define HPCNET_SOURCE_DIR (::hpcnet::test_paths::source_dir())
#define HPCNET_BINARY (::hpcnet::test_paths::binary())
