"""``python -m drc.cli`` runs the same CLI as the ``drc`` script."""

from drc.cli.main import main

main()
