"""The MySQL layer: everything DRC says to a MySQL/MariaDB server goes through here.

    sql.py       SQL text and identifier quoting, and the values bound to it (pure)

Nothing is imported here: a process that needs only the SQL text (a Spark worker of
``drc verify``) does not load the driver.
"""
