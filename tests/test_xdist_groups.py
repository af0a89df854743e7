"""Which tests the two-worker scheduler of tests/conftest.py keeps apart (docs/testing.md)."""

from __future__ import annotations

from tests.conftest import ROOT, group_of, marked_slow, starts_processes, work_unit

SMOKE = "tests/bench/test_bench_smoke.py::test_benchmark_runs_at_smoke_size[{}]"

MIXED = '''
import pytest

pytestmark = pytest.mark.timeout(240)


@pytest.mark.slow
def test_processes(): ...


@pytest.mark.trio
async def test_in_process(): ...


class TestBoth:
    @pytest.mark.slow
    def test_slow(self): ...

    def test_fast(self): ...


@pytest.mark.slow
class TestAllSlow:
    def test_one(self): ...
'''


def test_only_the_slow_tests_of_a_file_wait_for_the_processes_group() -> None:
    assert marked_slow(MIXED, "test_processes")
    assert not marked_slow(MIXED, "test_in_process")
    assert marked_slow(MIXED, "test_slow") and not marked_slow(MIXED, "test_fast")
    assert marked_slow(MIXED, "test_one")
    assert marked_slow(MIXED, "")  # the file has slow tests
    everything = "import pytest\npytestmark = [pytest.mark.slow]\ndef test_a(): ...\n"
    assert marked_slow(everything, "test_a") and marked_slow(everything, "test_b")
    assert not marked_slow("def test_a(): ...\n", "test_a")


STARTERS = '''
import pytest
from tests.harness.cluster import cluster, start_inproc, start_node


@pytest.fixture
def pair(tmp_path):
    return [start_node(tmp_path, "a"), start_node(tmp_path, "b")]


def two(tmp_path):
    with cluster(tmp_path, 2) as nodes:
        return nodes


def test_a_fixture_starts_processes(pair): ...


def test_a_helper_does(tmp_path):
    two(tmp_path)


def test_in_process(tmp_path):
    with cluster(tmp_path, 3, in_process=True) as nodes:
        start_inproc(tmp_path, "late", bootstrap=nodes)


def test_cli_commands_to_an_in_process_node(tmp_path):
    node = start_inproc(tmp_path, "n")
    assert node.cli("status").returncode == 0


def test_a_node_run_by_its_own_command_line(tmp_path):
    subprocess.Popen([sys.executable, "-m", "node.cli", "run", "--data-dir", str(tmp_path)])
'''


def test_a_test_starts_processes_through_what_it_names_in_its_module() -> None:
    assert starts_processes(STARTERS, "test_a_fixture_starts_processes")
    assert starts_processes(STARTERS, "test_a_helper_does")  # cluster() without in_process
    assert not starts_processes(STARTERS, "test_in_process")
    assert not starts_processes(STARTERS, "test_cli_commands_to_an_in_process_node")
    assert starts_processes(STARTERS, "test_a_node_run_by_its_own_command_line")
    assert starts_processes(STARTERS, "")  # some test of the module does


def test_real_files_are_grouped_by_what_their_tests_run() -> None:
    reach = "tests/node/test_hostile_reach.py::"
    assert group_of(reach + "test_late_and_silent_pingers_close_no_honest_connection") \
        == "processes"  # slow, node processes
    assert group_of(reach + "test_dialback_liars_do_not_make_a_node_public") is None  # in-process
    assert group_of(reach + "test_a_source_network_gets_only_its_share_of_circuits") is None
    assert group_of("tests/net/test_harness.py::test_anything") == "processes"
    assert group_of("tests/spark_jobs/test_cluster.py::test_anything") == "shared-db"
    assert group_of("tests/spark_jobs/test_rehash.py::test_anything[sqlite]") == "shared-db"
    assert group_of("tests/storage/test_events.py::test_anything") == "shared-db"
    # The SQLite case of a test run on both backends shares no database.
    assert group_of("tests/storage/test_events.py::test_anything[postgresql-1]") == "shared-db"
    assert group_of("tests/storage/test_events.py::test_anything[sqlite-1]") is None
    restart = ("tests/node/test_e2e_summary_restart.py::"
               "test_restart_after_sigkill_between_saves_serves_the_right_keys[{}]")
    assert group_of(restart.format("postgresql")) == "shared-db"
    assert group_of(restart.format("sqlite")) == "processes"  # slow, node processes
    assert group_of("tests/sync/test_anything.py::test_anything") is None
    # In-process nodes that the CLI under test talks to.
    assert group_of("tests/node/test_snapshot_cli.py::"
                    "test_rebuild_right_after_publishing_says_what_waits_and_until_when") is None


def test_a_smoke_is_grouped_by_its_script_and_the_helpers_it_imports() -> None:
    assert group_of(SMOKE.format("attack_bench")) == "processes"  # node processes
    assert group_of(SMOKE.format("backlog_rss_bench")) == "processes"  # via backlog_rss.py
    assert group_of(SMOKE.format("chaos_bench")) == "processes"  # network namespaces
    assert group_of(SMOKE.format("cluster_bench")) == "shared-db"  # SYNCNODE_TEST_PG
    assert group_of(SMOKE.format("spark_bench")) == "shared-db"  # a Spark cluster
    assert group_of(SMOKE.format("sds_bench")) is None  # computes in its own process
    assert group_of("tests/bench/test_bench_smoke.py::test_helper_imports[rss_slope]") is None


def test_a_file_outside_the_groups_goes_to_one_worker_whole() -> None:
    # Its module-scoped fixtures (a node, a cluster) are set up once, not once per worker.
    api = "tests/node/test_api_bounds.py"
    assert (ROOT / api).is_file()
    assert work_unit(api + "::test_a[x]") == work_unit(api + "::test_b") == api
    assert work_unit(SMOKE.format("net_bench")) == "processes"
