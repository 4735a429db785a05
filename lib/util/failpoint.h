// Failpoints: named places in the code where a test can stop, kill or order a run, so that concurrent
// events happen in one order for certain instead of by the clock (DESIGN rule 14). Unarmed, a failpoint
// costs one relaxed atomic load. Armed two ways:
//  - in a process's own tests: set_failpoint_hook(name, hook) runs `hook` at every pass;
//  - in a run started by a test: GPUTRAIN_FAILPOINTS="name[@n]=action;..." (docs/contributing.md
//    "Failpoints"), acting at the n-th pass of `name` in each process (the first without @n):
//      pause        create $GPUTRAIN_FAILPOINT_DIR/<name>.<pid>.reached, then wait until
//                   $GPUTRAIN_FAILPOINT_DIR/<name>.release exists (the test kills or releases it);
//      kill         SIGKILL this process there;
//      after:X[@m]  wait until failpoint X has been passed m times (1 without @m) in this process;
//      act          run the test action the code gives that failpoint (its comment says what it does).
//    Each action, as it acts, first leaves $GPUTRAIN_FAILPOINT_DIR/<name>.<pid>.fired (when the directory
//    is set): tests require it, so a failpoint renamed or never reached fails them instead of passing.
#pragma once
#include <functional>
#include <string>

namespace gputrain {

// Passes the failpoint `name`. Throws a usage Error when GPUTRAIN_FAILPOINTS cannot be read.
void failpoint(const char* name);
// The same, with the action `act` runs there.
void failpoint(const char* name, const std::function<void()>& act);

// Runs `hook` at every pass of `name` in this process (an empty hook removes it).
void set_failpoint_hook(const std::string& name, std::function<void()> hook);

}  // namespace gputrain
