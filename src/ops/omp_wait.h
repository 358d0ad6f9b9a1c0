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
// default therefore looks at the machine when it starts: when other processes keep at least
// kBusyCores cores busy it waits passively, otherwise it spins GOMP_SPINCOUNT=kOmpSpinCount rounds
// (short enough that a neighbour starting later does not bring the cliff back, long enough to
// keep an idle machine's speed; measured in docs/scaling.md, "Shared nodes").
inline constexpr const char* kOmpSpinCount = "30000";
inline constexpr double kBusyCores = 0.5;

// Cores kept busy by the machine's processes over `ms` milliseconds, from two samples of
// /proc/stat's "cpu" line (this process has not started its threads yet); -1 when unreadable.
double busy_cores(int ms);

// The variables that default needs, given get(name): a variable's value or nullptr when unset,
// and busy: busy_cores()'s figure. None when the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT
// (their choice stands); {{"OMP_WAIT_POLICY", "passive"}} when busy >= kBusyCores;
// {{"GOMP_SPINCOUNT", kOmpSpinCount}} otherwise (also when busy is unknown, < 0).
std::vector<std::pair<std::string, std::string>> omp_wait_defaults(
    const std::function<const char*(const char*)>& get, double busy);

// When omp_wait_defaults() of this process's environment is not empty: sets those variables and
// executes this program again (/proc/self/exe, the same argv), so it does not return. Returns
// when nothing was missing, or when the exec failed (the run goes on with libgomp's default).
// Call it first in main(), before anything that may not survive an exec.
void apply_omp_wait_defaults(char** argv);

}  // namespace hpcnet::ops
