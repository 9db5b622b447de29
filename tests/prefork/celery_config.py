"""The Celery settings of the Celery recipe (celery_recipe.py), shared with the sender in `run`,
which must not import the tasks module (that would build a runtime in the sender too).

The broker is kombu's `filesystem://` transport and the results are files (`file://`), all in one
folder: no server of their own.
"""

from __future__ import annotations

from pathlib import Path

from celery import Celery


def configure(celery: Celery, folder: str) -> Celery:
    """The broker and result settings shared by the worker and the client that sends tasks."""
    base = Path(folder)
    queue, processed, results = base / "queue", base / "processed", base / "results"
    control = base / "control"  # kombu's default is ./control, in the working directory
    for d in (queue, processed, results, control):
        d.mkdir(parents=True, exist_ok=True)
    celery.conf.update(
        broker_url="filesystem://",
        broker_transport_options={
            "data_folder_in": str(queue),
            "data_folder_out": str(queue),
            "processed_folder": str(processed),
            "store_processed": False,
            "control_folder": str(control),
        },
        result_backend=f"file://{results}",
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return celery
