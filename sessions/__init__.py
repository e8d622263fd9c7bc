"""The engine: everything mntui does, without a UI. Each subpackage is a wing importing
only the wings below it (doctor > watch > report > poll > launch > sync > ssh > history >
config > notify: pyproject's layers contract); the modules here are the ground below
them all: run records, results, errors, events, process tags, and the node package.
"""
