from perfsift.cli import main

if __name__ == "__main__":  # spawned stage processes import this module as __mp_main__
    main()
