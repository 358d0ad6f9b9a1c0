// How GNU OpenMP's threads (ours and oneDNN's) wait at a barrier, and hpcnet's default for it.
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded (before main), so the
// default is set in the environment and the program executed again.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hpcnet::ops {

// Left to itself (neither variable set) libgomp spins 300,000 rounds before a waiting thread
// sleeps; beside another busy process a team of 2 on 2 cores then waits at every barrier for
// threads the scheduler took away from spinners (yolov8n predict at 640 px fell from 9-10 to
// 1.6-2.1 images/s), while passive waiting (no spin) costs speed on an idle machine. hpcnet's
// default bounds the spin: GOMP_SPINCOUNT=kOmpSpinCount (measured in docs/scaling.md, "Shared
// nodes").
inline constexpr const char* kOmpSpinCount = "10000";

// The variables that default needs, given get(name): a variable's value or nullptr when unset.
// {{"GOMP_SPINCOUNT", kOmpSpinCount}} when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set;
// none when the user set either (their choice stands).
std::vector<std::pair<std::string, std::string>> omp_wait_defaults(
    const std::function<const char*(const char*)>& get);

// When omp_wait_defaults() of this process's environment is not empty: sets those variables and
// executes this program again (/proc/self/exe, the same argv), so it does not return. Returns
// when nothing was missing, or when the exec failed (the run goes on with libgomp's default).
// Call it first in main(), before anything that may not survive an exec.
void apply_omp_wait_defaults(char** argv);

}  // namespace hpcnet::ops
