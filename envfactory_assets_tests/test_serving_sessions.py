"""Many isolated episodes in one process (serving/sessions.py) on the fixture environments: the default cap of
256 held at once and the next one refused with ``session_capacity``, idle episodes expired, and a sandbox
worker that dies ending only its own episodes."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from envfactory_assets.config_checks import SettingError
from envfactory_assets.serving.errors import EpisodeDone, EpisodeExpired, SessionCapacityError, UnknownTask
from envfactory_assets.serving.sessions import SessionPool, SessionSettings
from envfactory_assets.serving.tasks import task_set
from envfactory_assets_tests.fixture_environments import THREE_DOMAINS, build_fixture_environments
from envfactory_assets_tests.rl_tasks import BOOKSHOP, rl_rows
from envfactory_assets_tests.worker_processes import kill_worker


@pytest.fixture(scope="module")
def tasks():
    envs = build_fixture_environments(*THREE_DOMAINS)
    return task_set(rl_rows(envs), envs)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_default_cap_holds_256_isolated_episodes_at_once_and_refuses_the_next(tasks):
    assert SessionSettings().max_sessions >= 256
    task = tasks.rows["rl_bookshop_reprice_and_delete"]
    book = task["gold_calls"][1]["arguments"]["book_id"]
    with SessionPool(tasks) as pool:

        def open_one(_: int) -> str | SessionCapacityError:
            try:
                return pool.open(task_id=task["id"]).episode_id
            except SessionCapacityError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=16) as clients:  # 300 resets from 16 threads at once
            opened = list(clients.map(open_one, range(300)))
        ids = [o for o in opened if isinstance(o, str)]
        refused = [o for o in opened if isinstance(o, SessionCapacityError)]
        assert pool.open_count == 256 and len(set(ids)) == 256 and len(refused) == 44
        assert str(refused[0]).startswith("session_capacity: this server holds 256 open episodes")
        assert refused[0].as_dict()["max_sessions"] == 256
        # every other episode deletes the book; the ones in between still see it: no state is shared
        for eid in ids[::2]:
            assert "deleted" in pool.call(eid, "delete_book", {"book_id": book}).result
        for eid in ids[1::2]:
            assert json.loads(pool.call(eid, "get_book", {"book_id": book}).result)["book_id"] == book
        for eid in ids[::2]:
            assert "not_found" in pool.call(eid, "get_book", {"book_id": book}).result
        pool.close_episode(ids[0])
        assert pool.open(task_id=task["id"]).episode_id  # a freed slot is taken again


def test_idle_episodes_expire_and_free_their_slot(tasks):
    clock = Clock()
    with SessionPool(tasks, SessionSettings(max_sessions=2, idle_timeout_s=60), clock=clock) as pool:
        idle = pool.open(task_id="rl_helpdesk_close").episode_id
        busy = pool.open(task_id="rl_helpdesk_close").episode_id
        with pytest.raises(SessionCapacityError):
            pool.open(task_id="rl_helpdesk_close")
        clock.now += 45
        pool.call(busy, "list_tickets", {})
        clock.now += 30  # idle: 75 s without a request; busy: 30 s
        third = pool.open(task_id="rl_helpdesk_close").episode_id  # the open expired the idle one first
        with pytest.raises(EpisodeExpired, match=r"^episode_expired: .*60 s without a request"):
            pool.call(idle, "list_tickets", {})
        assert pool.call(busy, "list_tickets", {}).error is None
        assert {busy, third} == {busy, third} and pool.open_count == 2
    # the reaper thread does it without any open
    with SessionPool(tasks, SessionSettings(idle_timeout_s=0.2)) as pool:
        pool.start_reaper()
        eid = pool.open(task_id="rl_helpdesk_close").episode_id
        deadline = time.monotonic() + 10
        while pool.open_count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.open_count == 0
        with pytest.raises(EpisodeExpired):
            pool.finish(eid)


def test_a_dead_worker_ends_only_its_own_episodes_and_the_others_go_on(tasks):
    with SessionPool(tasks) as pool:
        shop = pool.open(task_id="rl_bookshop_reprice_and_delete").episode_id
        shop_too = pool.open(task_id="rl_bookshop_look_up").episode_id
        three = pool.open(task_id="rl_three_environments").episode_id
        desk = pool.open(task_id="rl_helpdesk_close").episode_id
        desk_task = tasks.rows["rl_helpdesk_close"]
        pid = pool.worker_pids(shop)[BOOKSHOP]
        assert pool.worker_pids(three)[BOOKSHOP] == pid and BOOKSHOP not in pool.worker_pids(desk)
        kill_worker(pid)  # the bookshop's worker process dies
        for eid in (shop, shop_too, three):
            out = pool.call(eid, "get_book", {"book_id": "boo_00007"})
            assert (out.done, out.end_reason, out.reward) == (True, "episode_lost", None), out
            assert out.error["type"] == "episode_lost" and BOOKSHOP in out.error["env_ids"]
            assert out.error["episode_id"] == eid
            with pytest.raises(EpisodeDone):
                pool.call(eid, "get_book", {"book_id": "boo_00007"})
        # the helpdesk episode goes on, and ends with its full reward
        call = desk_task["gold_calls"][0]
        assert pool.call(desk, call["name"], call["arguments"]).error is None
        end = pool.finish(desk)
        assert (end.done, end.end_reason, end.reward, end.error) == (True, "final_answer", 1.0, None)
        # the next bookshop episode starts a fresh worker process
        again = pool.open(task_id="rl_bookshop_look_up").episode_id
        assert pool.call(again, "get_book", {"book_id": "boo_00007"}).error is None
        assert pool.worker_pids(again)[BOOKSHOP] != pid
        assert pool.open_count == 1


def _play_gold(pool: SessionPool, task: dict) -> tuple[str, dict]:
    eid = pool.open(task_id=task["id"]).episode_id
    for call in task["gold_calls"]:
        assert pool.call(eid, call["name"], call["arguments"]).error is None
    return eid, pool.finish(eid)


def test_episodes_of_a_task_fork_it_opened_once_and_end_as_if_opened_afresh(tasks):
    task = tasks.rows["rl_three_environments"]
    with SessionPool(tasks) as shared, SessionPool(tasks, SessionSettings(open_tasks=0)) as afresh:
        first, second = (shared.open(task_id=task["id"]).episode_id for _ in range(2))
        assert shared.opened_tasks == 1  # both episodes fork the one opened task
        shared.close_episode(first)
        shared.close_episode(second)
        for _ in range(2):  # the second time from the opened task, as the first
            _, end = _play_gold(shared, task)
            _, plain = _play_gold(afresh, task)
            assert afresh.opened_tasks == 0 and shared.opened_tasks == 1
            assert (end.reward, end.reward_breakdown, end.state_diff) == (
                plain.reward,
                plain.reward_breakdown,
                plain.state_diff,
            )
            assert end.reward == 1.0 and end.state_diff
    with pytest.raises(SettingError, match="open_tasks"):
        SessionSettings(open_tasks=-1)


def test_bad_settings_and_unknown_tasks_are_refused_by_name(tasks):
    with pytest.raises(SettingError, match=r"serve-openenv setting max_sessions=0: expected a whole number"):
        SessionSettings(max_sessions=0)
    with pytest.raises(SettingError, match="idle_timeout_s"):
        SessionSettings(idle_timeout_s=float("nan"))
    with SessionPool(tasks, SessionSettings(max_sessions=1)) as pool:
        with pytest.raises(UnknownTask, match=r"^unknown_task: .*'rl_helpdesk_clos'.*nearest: rl_helpdesk_close"):
            pool.open(task_id="rl_helpdesk_clos")
        assert pool.open_count == 0  # a refused open holds no slot
        first = pool.open(seed=3, split="held_out")
        assert first.task_id == "rl_bookshop_look_up"  # the only held-out row


def test_episodes_outlive_the_request_thread_that_opened_them(tasks):
    """A server's request threads come and go (OpenEnv gives each WebSocket its own), while the sandbox's worker
    processes die with the thread that started them (the kernel's parent-death signal, bubblewrap's
    --die-with-parent): the pool must start them on threads of its own."""
    with SessionPool(tasks) as pool:
        opened: dict[str, str] = {}
        opener = threading.Thread(target=lambda: opened.update(eid=pool.open(task_id="rl_helpdesk_close").episode_id))
        opener.start()
        opener.join()
        time.sleep(0.5)
        out = pool.call(opened["eid"], "list_tickets", {})
        assert out.error is None and not out.done, out
