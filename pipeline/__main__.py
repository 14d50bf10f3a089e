import sys

from pipeline.serve.client import main

sys.exit(main())
