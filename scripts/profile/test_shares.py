"""Tests of shares.py on `perf script` text shaped as perf prints it."""

import io
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shares  # noqa: E402

# Three samples, leaf first: a write under a callback's connection, an allocation in the
# claim loop's timer decoding, and a page fault with its stack cut short.
SCRIPT = """\
chime-executor 101
\tffffffff81000001 tcp_sendmsg
\tffffffff81000002 do_writev
\tffffffff81000130 entry_SYSCALL_64_after_hwframe
\t00000000000fde9d __GI___writev
\t0000000001961000 <&mio::net::tcp::stream::TcpStream as std::io::Write>::write_vectored
\t0000000001962000 hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_catch
\t0000000001963000 tokio::runtime::task::harness::Harness<T,S>::poll

chime-executor 101
\t0000000000983731 _mi_page_malloc_zero
\t0000000001200000 chime_storage::rows::timer
\t0000000001300000 chime_storage::postgres::timers::<impl chime_storage::TimerStore for chime_storage::postgres::PgStore>::get_timers::{{closure}}
\t0000000001400000 chime_executor::claim::claim_loop::{{closure}}
\t0000000001963000 tokio::runtime::task::harness::Harness<T,S>::poll

chime-executor 102
\tffffffff82000000 clear_page_erms
\tffffffff82000100 asm_exc_page_fault
\t0000000000990000 mi_page_free_list_extend
\tffffffffffffffff [unknown]

"""


class SharesTest(unittest.TestCase):
    def setUp(self):
        self.out = shares.shares(io.StringIO(SCRIPT), probes=[r"rows::timer$"])

    def test_each_sample_counts_under_the_task_that_names_it(self):
        self.assertEqual(self.out["samples"], 3)
        tasks = dict(self.out["tasks"])
        self.assertEqual(tasks["hyper connections"], 33.3)
        self.assertEqual(tasks["claim loop"], 33.3)
        self.assertEqual(tasks["other (stack cut short or not named)"], 33.3)

    def test_the_kernels_work_is_named_by_the_call_or_fault_into_it(self):
        own = dict(self.out["own"])
        self.assertIn("[syscall] __GI___writev", own)
        self.assertIn("[page fault] mi_page_free_list_extend", own)
        self.assertIn("_mi_page_malloc_zero", own)

    def test_a_probe_counts_samples_with_any_frame_matching(self):
        self.assertEqual(self.out["probes"], [(r"rows::timer$", 33.3)])

    def test_the_outermost_task_wins(self):
        # A connection's write made inside a callback task counts for the callback.
        nested = SCRIPT.replace(
            "tokio::runtime::task::harness::Harness<T,S>::poll\n\nchime-executor 101",
            "chime_executor::claim::<impl chime_executor::Inner>::fire::{{closure}}\n\n"
            "chime-executor 101", 1)
        tasks = dict(shares.shares(io.StringIO(nested))["tasks"])
        self.assertEqual(tasks["callback task"], 33.3)
        self.assertNotIn("hyper connections", tasks)


if __name__ == "__main__":
    unittest.main()
