#!/bin/bash
sleep 120
touch /tmp/solved
